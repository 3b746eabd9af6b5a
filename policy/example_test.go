package policy_test

import (
	"fmt"
	"time"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/policy"
)

// A Transport asks EAF whether a response should move once its headers
// show its size, and then while it arrives (see intents.Mover). Here a
// 1 MB response arrives at 2 Mbit/s on a near path that five other
// transfers load too; a new connection on the far, fast path would have
// it in well under a second.
func ExampleEAF_Move() {
	near := &intents.Path{Name: "wlan0", Up: true,
		Prior: intents.Estimate{RTT: 20 * time.Millisecond, Bandwidth: 10e6, Pending: 6e6, Active: 6}}
	far := &intents.Path{Name: "wwan0", Up: true, Prior: intents.Estimate{RTT: 100 * time.Millisecond, Bandwidth: 50e6}}
	from := intents.Candidate{ID: 3, Path: near, InFlight: 1, Pending: 1e6, Rate: 2e6}
	req := &intents.Request{Intents: intents.Intents{SizeToBeReceived: 1e6}, Paths: []*intents.Path{near, far},
		Candidates: []intents.Candidate{from}, Explain: true}
	to, why := (&policy.EAF{}).Move(req, &req.Candidates[0])
	fmt.Println(to.Name)
	fmt.Println(why)
	// Output:
	// wwan0
	// eaf: moves: wwan0 new predicted 814ms vs wlan0 #3 4.8s at 10.0 Mbit/s (1000000 B to come)
}

// At a page's tail the Transport asks EAF whether to share a response's
// rest with another path (see intents.Splitter). Here 4 MB still come at
// 6 Mbit/s on the one busy path, and the other path, as fast and as near,
// carries nothing: its new connection takes the last part, and both
// parts arrive in about half the time.
func ExampleEAF_Split() {
	wlan := &intents.Path{Name: "wlan0", Up: true,
		Prior: intents.Estimate{RTT: 50 * time.Millisecond, Bandwidth: 6e6, Pending: 4e6, Active: 1}}
	wwan := &intents.Path{Name: "wwan0", Up: true, Prior: intents.Estimate{RTT: 50 * time.Millisecond, Bandwidth: 6e6}}
	from := intents.Candidate{ID: 1, Path: wlan, InFlight: 1, Pending: 4e6, BytesIn: 1e6, Rate: 6e6}
	req := &intents.Request{Intents: intents.Intents{SizeToBeReceived: 4e6}, Paths: []*intents.Path{wlan, wwan},
		Candidates: []intents.Candidate{from}, Explain: true}
	to, part, why := (&policy.EAF{}).Split(req, &req.Candidates[0])
	fmt.Println(to.Name, part)
	fmt.Println(why)
	// Output:
	// wwan0 1946720
	// eaf: splits: the last 1946720 B on wwan0, both parts predicted 2.738s vs wlan0 #1 5.333s whole (4000000 B to come)
}

// A Transport asks EAF whether to race a first request over two paths
// (see intents.Racer): only while none of them has a capacity measured,
// remembered or lent by a prior. Once a path's rate is known, the policy
// places every request on its own.
func ExampleEAF_RacesFirst() {
	wlan := &intents.Path{Name: "wlan0", Up: true}
	wwan := &intents.Path{Name: "wwan0", Up: true}
	fmt.Println((&policy.EAF{}).RacesFirst(&intents.Request{Paths: []*intents.Path{wlan, wwan}}))
	wlan.Prior.Bandwidth = 20e6
	fmt.Println((&policy.EAF{}).RacesFirst(&intents.Request{Paths: []*intents.Path{wlan, wwan}}))
	// Output:
	// true
	// false
}
