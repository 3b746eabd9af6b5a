//go:build linux

// Command pageload loads a web page over the emulated two-path testbed with
// several contenders and prints their page load times: the Socket Intents
// paper's experiment, on real sockets. It needs root (network namespaces).
//
//	sudo go run ./examples/pageload                  # symmetric, 32 × 100 KB
//	sudo go run ./examples/pageload -scenario asymmetric -objects 16 -size 1000000
//
// The server side (link emulator, web server) runs in this process; the
// client side runs as a copy of this program inside the client namespace,
// so every socket it opens belongs there.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
	"github.com/sockintents/intents/policy"
)

const childEnv = "INTENTS_PAGELOAD_CHILD"

type scenario struct {
	name  string
	paths []testbed.PathSpec
}

var scenarios = map[string]scenario{
	// The testbed presets of the design notes.
	"symmetric":  {"symmetric", []testbed.PathSpec{testbed.Symmetric(50*time.Millisecond, 6e6), testbed.Symmetric(50*time.Millisecond, 5e6)}},
	"asymmetric": {"asymmetric", []testbed.PathSpec{testbed.Symmetric(20*time.Millisecond, 12e6), testbed.Symmetric(100*time.Millisecond, 5e6)}},
}

// config travels from the parent to the client process.
type config struct {
	Objects  int
	Size     int64
	RootSize int64
	Reps     int
	Host     string
	// The paths' settings, given to EAF as priors as the paper's simulator
	// knew them; measurements refine them.
	RTT  []time.Duration
	Rate []int64
}

// result is one page load of one contender.
type result struct {
	Contender string
	PLT       time.Duration
	Bytes     int64
	Paths     map[string]int // objects per path
}

func main() {
	if os.Getenv(childEnv) != "" {
		client()
		return
	}
	scen := flag.String("scenario", "symmetric", "symmetric or asymmetric")
	objects := flag.Int("objects", 32, "objects on the page (after the root object)")
	size := flag.Int64("size", 100_000, "bytes per object")
	reps := flag.Int("reps", 5, "page loads per contender (medians are reported)")
	flag.Parse()
	sc, ok := scenarios[*scen]
	if !ok {
		log.Fatalf("unknown scenario %q", *scen)
	}
	if os.Geteuid() != 0 {
		log.Fatal("pageload builds network namespaces: run it as root (sudo)")
	}
	tb, err := testbed.Start(testbed.Spec{Paths: sc.paths, MPTCP: &testbed.MPTCPSpec{}})
	if err != nil {
		log.Fatal(err)
	}
	defer tb.Close()
	if _, err := tb.StartWeb(testbed.WebOptions{}); err != nil { // MPTCP-capable, TCP for the rest
		log.Fatal(err)
	}
	cfg := newConfig(sc, tb, *objects, *size, *reps)
	results, err := runClient(tb, cfg)
	if err != nil {
		log.Fatal(err)
	}
	report(os.Stdout, sc, cfg, results)
}

func newConfig(sc scenario, tb *testbed.Testbed, objects int, size int64, reps int) config {
	cfg := config{Objects: objects, Size: size, RootSize: 10_000, Reps: reps, Host: tb.Hosts[0].String()}
	for _, p := range sc.paths {
		cfg.RTT = append(cfg.RTT, p.RTT())
		cfg.Rate = append(cfg.Rate, p.Down.Rate)
	}
	return cfg
}

// runClient runs this program again inside the client namespace and
// collects its results.
func runClient(tb *testbed.Testbed, cfg config) ([]result, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	arg, _ := json.Marshal(cfg)
	cmd := exec.Command("ip", "netns", "exec", tb.Client.Name, self)
	cmd.Env = append(os.Environ(), childEnv+"="+string(arg))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	var results []result
	dec := json.NewDecoder(&out)
	for dec.More() {
		var r result
		if err := dec.Decode(&r); err != nil {
			return nil, err
		}
		results = append(results, r)
	}
	return results, nil
}

type contender struct {
	name string
	rt   http.RoundTripper
	// sizes says whether the loader attaches size intents.
	sizes bool
}

// client loads the page with every contender, inside the client namespace.
func client() {
	var cfg config
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &cfg); err != nil {
		log.Fatal(err)
	}
	bound := func(dev string) http.RoundTripper {
		d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			var err error
			c.Control(func(fd uintptr) { err = unix.BindToDevice(int(fd), dev) })
			return err
		}}
		return &http.Transport{DialContext: d.DialContext, MaxConnsPerHost: 6, MaxIdleConnsPerHost: 6}
	}
	manager := func(p intents.Policy, priors bool) *intents.Manager {
		paths := []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}}
		if priors {
			for i := range paths {
				paths[i].RTT, paths[i].Bandwidth = cfg.RTT[i], cfg.Rate[i]
			}
		}
		// Every path an MPTCP endpoint, so MPTCP connections get a subflow
		// on the other path (the client runs as root in its namespace).
		m, err := intents.NewManager(intents.Config{Paths: paths, Policy: p, NoWatch: true, MPTCPEndpoints: true})
		if err != nil {
			log.Fatal(err)
		}
		if err := m.MPTCPError(); err != nil {
			log.Fatal(err)
		}
		return m
	}
	withPolicy := func(p intents.Policy, priors bool) http.RoundTripper {
		return &intents.Transport{Manager: manager(p, priors)}
	}
	// Plain net/http over MPTCP connections whose first subflow is on path 1.
	mptcpOn1 := func() http.RoundTripper {
		d := &intents.Dialer{Manager: manager(nil, false)}
		dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx = intents.WithIntents(ctx, intents.Intents{Multipath: intents.MultipathAggregate,
				Interfaces: map[string]intents.Level{"p1": intents.LevelPrefer}})
			return d.DialContext(ctx, network, addr)
		}
		return &http.Transport{DialContext: dial, MaxConnsPerHost: 6, MaxIdleConnsPerHost: 6}
	}
	contenders := []contender{
		{"path 1 (net/http)", bound("p1"), false},
		{"path 2 (net/http)", bound("p2"), false},
		{"round robin (intents)", withPolicy(&policy.RoundRobin{}, false), true},
		{"EAF (intents, measured)", withPolicy(&policy.EAF{}, false), true},
		{"EAF (intents, priors)", withPolicy(&policy.EAF{}, true), true},
		{"MPTCP, 1st subflow p1 (net/http)", mptcpOn1(), false},
		{"EAF+MPTCP (intents, priors)", withPolicy(&policy.EAFMPTCP{}, true), true},
	}
	enc := json.NewEncoder(os.Stdout)
	total, done := len(contenders)*(cfg.Reps+1), 0
	progress := func(name string) {
		done++
		fmt.Fprintf(os.Stderr, "\rpageload: %3d/%d loads  %-36s", done, total, name)
	}
	defer fmt.Fprintln(os.Stderr)
	for _, c := range contenders {
		loadPage(c, cfg) // warm-up: estimates and a first look at the paths, not measured
		progress(c.name)
		for range cfg.Reps {
			if err := enc.Encode(loadPage(c, cfg)); err != nil {
				log.Fatal(err)
			}
			progress(c.name)
		}
		if ci, ok := c.rt.(interface{ CloseIdleConnections() }); ok {
			ci.CloseIdleConnections()
		}
	}
}

// loadPage fetches the root object, then all the others at once (the
// transports keep to 6 connections per host), and times the whole.
func loadPage(c contender, cfg config) result {
	res := result{Contender: c.name, Paths: map[string]int{}}
	var mu sync.Mutex
	fetch := func(i int, size int64) {
		ctx := context.Background()
		if c.sizes {
			ctx = intents.WithIntents(ctx, intents.Intents{SizeToBeReceived: size})
		}
		var conn net.Conn
		ctx = withGotConn(ctx, &conn)
		url := fmt.Sprintf("http://%s/obj/%d?o=%d", cfg.Host, size, i)
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		resp, err := c.rt.RoundTrip(req)
		if err != nil {
			log.Fatalf("%s: %v", c.name, err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			log.Fatalf("%s: %v", c.name, err)
		}
		mu.Lock()
		res.Bytes += n
		if conn != nil {
			res.Paths[localDev(conn)]++
		}
		mu.Unlock()
	}
	start := time.Now()
	fetch(-1, cfg.RootSize)
	var wg sync.WaitGroup
	for i := range cfg.Objects {
		wg.Go(func() { fetch(i, cfg.Size) })
	}
	wg.Wait()
	res.PLT = time.Since(start)
	return res
}

// localDev names the path by the connection's source address (10.71.i.1).
func localDev(c net.Conn) string {
	ip := c.LocalAddr().(*net.TCPAddr).IP.To4()
	if ip == nil {
		return "?"
	}
	return fmt.Sprintf("p%d", ip[2])
}

func report(w io.Writer, sc scenario, cfg config, results []result) {
	by := map[string][]result{}
	var order []string
	for _, r := range results {
		if _, ok := by[r.Contender]; !ok {
			order = append(order, r.Contender)
		}
		by[r.Contender] = append(by[r.Contender], r)
	}
	median := func(rs []result) (med, lo, hi time.Duration) {
		d := make([]time.Duration, len(rs))
		for i, r := range rs {
			d[i] = r.PLT
		}
		slices.Sort(d)
		return d[len(d)/2], d[0], d[len(d)-1]
	}
	best := time.Duration(0)
	for _, name := range order[:2] {
		if m, _, _ := median(by[name]); best == 0 || m < best {
			best = m
		}
	}
	ideal := idealPLT(sc, cfg)

	fmt.Fprintf(w, "scenario %s: ", sc.name)
	for i, p := range sc.paths {
		fmt.Fprintf(w, "path %d %v RTT %.1f Mbit/s; ", i+1, p.RTT(), float64(p.Down.Rate)/1e6)
	}
	fmt.Fprintf(w, "page: 1 × %d B root, then %d × %d B; %d loads each\n", cfg.RootSize, cfg.Objects, cfg.Size, len(by[order[0]]))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "contender\tmedian PLT\tmin\tmax\tvs better single path\tPLT / ideal\tobjects per path\t")
	for _, name := range order {
		med, lo, hi := median(by[name])
		fmt.Fprintf(tw, "%s\t%.2f s\t%.2f s\t%.2f s\t%+.0f %%\t%.2f\t%v\t\n", name, med.Seconds(), lo.Seconds(), hi.Seconds(),
			(med.Seconds()/best.Seconds()-1)*100, med.Seconds()/ideal.Seconds(), by[name][len(by[name])-1].Paths)
	}
	fmt.Fprintf(tw, "ideal (bytes / Σ rates + 3 RTT)\t%.2f s\t\t\t%+.0f %%\t1.00\t\t\n", ideal.Seconds(), (ideal.Seconds()/best.Seconds()-1)*100)
	tw.Flush()
}

// idealPLT is the lower bound: all bytes at the sum of the paths' rates,
// after the unavoidable round trips: the handshake and the root request on
// the fastest path, then one more request round trip for the objects.
func idealPLT(sc scenario, cfg config) time.Duration {
	var rateSum float64
	minRTT := sc.paths[0].RTT()
	for _, p := range sc.paths {
		rateSum += float64(p.Down.Rate)
		minRTT = min(minRTT, p.RTT())
	}
	total := cfg.RootSize + int64(cfg.Objects)*cfg.Size
	return time.Duration(float64(total*8)/rateSum*float64(time.Second)) + 3*minRTT
}
