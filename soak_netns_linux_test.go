package intents_test

// A chaos soak: a steady mixed load through one Transport with EAF over
// the two-path testbed while a schedule drawn from a seed breaks the
// links, the DNS servers and the web server every few seconds. The parent
// (TestNetnsSoak) runs the testbed, the servers and the schedule; the
// child (TestNetnsSoakChild) runs the load inside the client namespace and
// checks what a caller gets. Both derive the schedule from the seed, so
// the child can say which faults were active when a request failed.
//
//	sudo go test -run 'TestNetnsSoak$' -soak 1h -soak.seed 7 -timeout 2h -v .

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	osexec "os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/h3"
	"github.com/sockintents/intents/internal/testbed"
	"github.com/sockintents/intents/policy"
)

var (
	soakFor  = flag.Duration("soak", 3*time.Minute, "how long TestNetnsSoak's load runs")
	soakSeed = flag.Uint64("soak.seed", 1, "the seed of TestNetnsSoak's chaos schedule and load")
)

// The soak's paths at rest, before the schedule changes them.
var soakPaths = []testbed.PathSpec{testbed.Symmetric(30*time.Millisecond, 20e6), testbed.Symmetric(60*time.Millisecond, 8e6)}

// faultKind is one way the schedule breaks something.
type faultKind int

const (
	faultLinkDown  faultKind = iota // the client's device down: a link event
	faultBlackhole                  // every packet lost, the device up
	faultShape                      // another rate and delay
	faultLoss                       // random loss
	faultUDP                        // UDP dropped (QUIC blocked)
	faultTrace                      // the downlink follows a cellular trace
	faultDNS                        // the path's DNS server silent
	faultRestart                    // the web server restarted (all paths)
	numFaults
)

var faultNames = [numFaults]string{"link down", "blackhole", "rate/delay", "loss burst", "UDP blocked", "cellular trace", "DNS silent", "server restart"}

func (k faultKind) String() string { return faultNames[k] }

// fault is one entry of the chaos schedule: from at, for dur.
type fault struct {
	at, dur time.Duration
	kind    faultKind
	path    int // index into the testbed's paths; every path for a restart
	rate    int64
	delay   time.Duration
	loss    float64
	trace   string
	offset  time.Duration // into the trace
	abrupt  bool          // a restart that cuts every connection
}

func (f fault) String() string {
	var what string
	switch f.kind {
	case faultShape:
		what = fmt.Sprintf(" %.1f Mbit/s %v", float64(f.rate)/1e6, f.delay)
	case faultLoss:
		what = fmt.Sprintf(" %.0f %%", 100*f.loss)
	case faultTrace:
		what = " " + f.trace
	case faultRestart:
		if f.abrupt {
			return fmt.Sprintf("%v server restart, abrupt", f.at.Round(time.Millisecond))
		}
		return fmt.Sprintf("%v server restart, graceful", f.at.Round(time.Millisecond))
	}
	return fmt.Sprintf("%v path %d %v%s for %v", f.at.Round(time.Millisecond), f.path+1, f.kind, what, f.dur.Round(time.Millisecond))
}

// faultAfterglow is how long after a fault ends its effects are still
// put down to it (a retransmission timeout backing off, a connection
// closed by the restart read after).
const faultAfterglow = 3 * time.Second

// soakTraces are the trace files a downlink may follow (the project's
// traces, beside the checkout).
var soakTraces = []string{"Verizon-LTE-short", "TMobile-LTE-short", "Verizon-EVDO-driving"}

const soakTraceDir = "../shared/traces"

// chaosSchedule draws the faults of a run of the given length from seed:
// one every 2 to 6 s after a calm first 5 s, none of a kind on a path
// while one of that kind is still active there.
func chaosSchedule(seed uint64, length time.Duration) []fault {
	rng := rand.New(rand.NewPCG(seed, 0x50a4))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	var busy [numFaults][2]time.Duration
	var out []fault
	for at := 5 * time.Second; at < length; at += between(2*time.Second, 6*time.Second) {
		f := fault{at: at, kind: faultKind(rng.IntN(int(numFaults))), path: rng.IntN(2)}
		switch f.kind {
		case faultLinkDown, faultBlackhole:
			f.dur = between(time.Second, 8*time.Second)
		case faultShape:
			f.dur = between(3*time.Second, 15*time.Second)
			f.rate = int64(between(500_000, 30_000_000)) // bits/s, drawn as a duration's nanoseconds
			f.delay = between(5*time.Millisecond, 150*time.Millisecond)
		case faultLoss:
			f.dur = between(time.Second, 5*time.Second)
			f.loss = 0.02 + 0.28*rng.Float64()
		case faultUDP:
			f.dur = between(5*time.Second, 20*time.Second)
		case faultTrace:
			f.dur = between(10*time.Second, 30*time.Second)
			f.trace = soakTraces[rng.IntN(len(soakTraces))]
			f.offset = between(0, 120*time.Second)
		case faultDNS:
			f.dur = between(2*time.Second, 10*time.Second)
		case faultRestart:
			f.abrupt = rng.IntN(2) == 0
			f.path = -1
		}
		if f.path >= 0 {
			if busy[f.kind][f.path] > at {
				continue
			}
			busy[f.kind][f.path] = at + f.dur
		}
		out = append(out, f)
	}
	return out
}

// activeFaults are the kinds of the faults active (or just ended) at any
// moment of [from, to], measured from the schedule's start.
func activeFaults(schedule []fault, from, to time.Duration) []faultKind {
	var kinds []faultKind
	for _, f := range schedule {
		if f.at <= to && f.at+f.dur+faultAfterglow >= from && !slices.Contains(kinds, f.kind) {
			kinds = append(kinds, f.kind)
		}
	}
	slices.Sort(kinds)
	return kinds
}

// TestNetnsSoak runs the chaos soak for -soak (3 minutes by default) with
// the schedule of -soak.seed. The load, in the client namespace, checks
// what callers get (TestNetnsSoakChild); this side checks what the
// servers saw: no POST arrived twice, no request that prohibited a path
// arrived over it, no DNS query reached a path's server over another.
func TestNetnsSoak(t *testing.T) {
	testbed.SkipIfShort(t, (*soakFor + 30*time.Second).Round(time.Minute).String())
	testbed.RequireRoot(t)
	if _, err := osexec.LookPath("nginx"); err != nil {
		t.Skip("needs nginx (apt-get install nginx; .ci/run installs it)")
	}
	tb := testbed.New(t, testbed.Spec{Servers: 3, Paths: soakPaths})
	servers, err := tb.StartDNS()
	require.NoError(t, err)
	names := map[string]netip.Addr{"web.test": tb.Hosts[0], "api.test": tb.Hosts[0], "plain.test": tb.Hosts[1], "nginx.test": tb.Hosts[2]}
	for _, s := range servers {
		for name, a := range names {
			s.Set(name, a)
		}
	}
	web, err := tb.StartWeb(testbed.WebOptions{Hosts: tb.Hosts[:2], HTTP3: true, AdvertiseHTTP3: true})
	require.NoError(t, err)
	dir := t.TempDir()
	startNginx(t, tb, dir, tb.Hosts[2], web.CA)
	posts := newPostCounter()
	web.Handle("api.test", posts.handler())

	var traces map[string]*testbed.Trace
	if _, err := os.Stat(soakTraceDir); err == nil {
		traces = map[string]*testbed.Trace{}
		for _, name := range soakTraces {
			tr, err := testbed.ReadTrace(filepath.Join(soakTraceDir, name+".down"))
			require.NoError(t, err)
			traces[name] = tr
		}
	} else {
		t.Logf("the project's traces are not beside this checkout (%v): the cellular-trace faults shape nothing", err)
	}

	schedule := chaosSchedule(*soakSeed, *soakFor)
	start := time.Now().Add(2 * time.Second) // the child's set-up
	t.Logf("seed %d, %v, %d faults:", *soakSeed, *soakFor, len(schedule))
	for _, f := range schedule {
		t.Log("\t", f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		runChaos(ctx, t, tb, servers, web, traces, schedule, start)
	}()
	t.Run("load", func(t *testing.T) { // its failure leaves the checks below to run
		testbed.RunTest(t, tb.Client, "TestNetnsSoakChild", fmt.Sprintf("%d %v %d %s", *soakSeed, *soakFor, start.UnixNano(), dir))
	})
	cancel()
	<-chaosDone

	if dup := posts.twice(); len(dup) > 0 {
		t.Errorf("POSTs that reached the server more than once: %v", dup)
	}
	t.Logf("POSTs the server saw: %d", posts.total())
	for _, r := range web.Requests() {
		for i, p := range tb.Paths {
			if strings.Contains(r.URI, "prohibit=p"+strconv.Itoa(i+1)) && r.Remote.Addr() == p.ClientAddr {
				t.Errorf("%s %s arrived over path %d, which it prohibited", r.Method, r.URI, i+1)
			}
		}
	}
	for i, s := range servers {
		for src, n := range s.QueriesFrom() {
			if src != tb.Paths[i].ClientAddr {
				t.Errorf("path %d's DNS server got %d queries from %v, not over its path", i+1, n, src)
			}
		}
		t.Logf("path %d's DNS server: %d queries", i+1, s.Queries())
	}
}

// runChaos applies the schedule's faults on time and undoes each when it
// ends, until ctx ends; then it restores the links and the DNS servers.
// One goroutine makes every change, so a change's read-modify-write of a
// link's parameters races no other.
func runChaos(ctx context.Context, t *testing.T, tb *testbed.Testbed, servers []*testbed.DNSServer, web *testbed.WebServer,
	traces map[string]*testbed.Trace, schedule []fault, start time.Time) {
	type step struct {
		at  time.Duration
		f   fault
		end bool
	}
	var steps []step
	for _, f := range schedule {
		steps = append(steps, step{f.at, f, false})
		if f.kind != faultRestart {
			steps = append(steps, step{f.at + f.dur, f, true})
		}
	}
	slices.SortStableFunc(steps, func(a, b step) int { return int(a.at - b.at) })
	both := func(p *testbed.Path, change func(*testbed.LinkParams)) {
		for _, d := range []*testbed.Direction{p.Up, p.Down} {
			lp := d.Params()
			change(&lp)
			d.Set(lp)
		}
	}
	defer func() { // the links and servers as they were, for the checks after the load
		for i, p := range tb.Paths {
			p.SetDown(false)
			if err := tb.SetLinkUp(p, true); err != nil {
				t.Errorf("setting path %d up: %v", i+1, err)
			}
			p.Up.Set(soakPaths[i].Up)
			p.Down.Set(soakPaths[i].Down)
			servers[i].SetSilent(false)
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for _, s := range steps {
		timer.Reset(time.Until(start.Add(s.at)))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		f := s.f
		if f.kind == faultRestart {
			if err := web.Restart(!f.abrupt); err != nil {
				t.Errorf("restarting the web server: %v", err)
			}
			continue
		}
		p, rest := tb.Paths[f.path], soakPaths[f.path]
		switch f.kind {
		case faultLinkDown:
			if err := tb.SetLinkUp(p, s.end); err != nil {
				t.Errorf("%v: %v", f, err)
			}
		case faultBlackhole:
			p.SetDown(!s.end)
		case faultShape:
			both(p, func(lp *testbed.LinkParams) {
				lp.Rate, lp.Delay = f.rate, f.delay
				if s.end {
					lp.Rate, lp.Delay = rest.Up.Rate, rest.Up.Delay
				}
			})
		case faultLoss:
			both(p, func(lp *testbed.LinkParams) {
				lp.Loss = f.loss
				if s.end {
					lp.Loss = 0
				}
			})
		case faultUDP:
			both(p, func(lp *testbed.LinkParams) { lp.DropUDP = !s.end })
		case faultTrace:
			lp := p.Down.Params()
			lp.Trace, lp.TraceStart = traces[f.trace], f.offset
			if s.end {
				lp.Trace = nil
			}
			p.Down.Set(lp)
		case faultDNS:
			servers[f.path].SetSilent(!s.end)
		}
	}
	<-ctx.Done()
}

// postCounter serves api.test: POST /post counts each arrival by its id
// (before reading the body) and answers the body's SHA-256 and the count;
// GET /stream sends ?chunks=N chunks of 1 kB of the test object, one every
// ?every=D, as a stream that stays open.
type postCounter struct {
	mu   sync.Mutex
	seen map[string]int
}

func newPostCounter() *postCounter { return &postCounter{seen: map[string]int{}} }

const streamChunk = 1024

func (c *postCounter) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /post", func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		c.mu.Lock()
		c.seen[id]++
		n := c.seen[id]
		c.mu.Unlock()
		h := sha256.New()
		if _, err := io.Copy(h, http.MaxBytesReader(w, r.Body, 1<<20)); err != nil {
			return
		}
		w.Header().Set("X-Count", strconv.Itoa(n))
		io.WriteString(w, hex.EncodeToString(h.Sum(nil)))
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		chunks, _ := strconv.Atoi(r.URL.Query().Get("chunks"))
		every, _ := time.ParseDuration(r.URL.Query().Get("every"))
		if chunks <= 0 || chunks > 1000 || every <= 0 {
			http.Error(w, "want ?chunks=N&every=D", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(chunks*streamChunk))
		obj := testbed.NewObject(int64(chunks * streamChunk))
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := range chunks {
			if i > 0 {
				select {
				case <-tick.C:
				case <-r.Context().Done():
					return
				}
			}
			if _, err := io.CopyN(w, obj, streamChunk); err != nil {
				return
			}
			if err := http.NewResponseController(w).Flush(); err != nil {
				return
			}
		}
	})
	return mux
}

// twice lists the ids that arrived more than once.
func (c *postCounter) twice() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id, n := range c.seen {
		if n > 1 {
			out = append(out, id+"×"+strconv.Itoa(n))
		}
	}
	slices.Sort(out)
	return out
}

func (c *postCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// soakRequest is one request of the load: what to send and what the
// body must be.
type soakRequest struct {
	kind     string
	method   string
	url      string
	in       intents.Intents
	body     []byte
	want     [32]byte // the response body's SHA-256
	wantLen  int64
	deadline time.Duration
}

// nextRequest draws one request of the mix from rng.
func nextRequest(rng *rand.Rand, id string) soakRequest {
	size := func(lo, hi int64) int64 { return lo + rng.Int64N(hi-lo) }
	obj := func(kind, url string, n int64, deadline time.Duration) soakRequest {
		return soakRequest{kind: kind, method: http.MethodGet, url: url, want: testbed.ObjectSum(n), wantLen: n, deadline: deadline}
	}
	switch x := rng.IntN(100); {
	case x < 15: // small, HTTP/2 or HTTP/3
		n := size(1_000, 64_000)
		return obj("small", fmt.Sprintf("https://web.test/obj/%d?id=%s", n, id), n, 15*time.Second)
	case x < 25: // small, HTTP/1.1 in the clear
		n := size(1_000, 64_000)
		return obj("small h1", fmt.Sprintf("http://plain.test/obj/%d?id=%s", n, id), n, 15*time.Second)
	case x < 35: // small, from nginx
		i := rng.IntN(nginxObjects)
		return obj("small nginx", fmt.Sprintf("https://nginx.test/obj%d?id=%s", i, id), nginxObjectSize(i), 15*time.Second)
	case x < 45: // small, a path prohibited
		n, p := size(1_000, 64_000), 1+rng.IntN(2)
		r := obj("prohibit", fmt.Sprintf("https://web.test/obj/%d?prohibit=p%d&id=%s", n, p, id), n, 15*time.Second)
		r.in.Interfaces = map[string]intents.Level{"p" + strconv.Itoa(p): intents.LevelProhibit}
		return r
	case x < 55: // large, ranges served
		n := size(1_000_000, 4_000_000)
		return obj("large", fmt.Sprintf("https://web.test/obj/%d?id=%s", n, id), n, 60*time.Second)
	case x < 60: // large, no ranges (generated)
		n := size(500_000, 2_000_000)
		return obj("large dynamic", fmt.Sprintf("https://web.test/obj/%d?dynamic&id=%s", n, id), n, 60*time.Second)
	case x < 65: // large, over both paths
		r := obj("aggregate", fmt.Sprintf("https://nginx.test/big?id=%s", id), nginxBig, 60*time.Second)
		r.in.Multipath = intents.MultipathAggregate
		return r
	case x < 90: // POST, over TLS or in the clear
		body := make([]byte, size(1_000, 256_000))
		for i := range body {
			body[i] = byte(rng.Uint32())
		}
		scheme := "https"
		if x >= 80 {
			scheme = "http"
		}
		sum := sha256.Sum256(body)
		return soakRequest{kind: "post " + scheme, method: http.MethodPost, url: scheme + "://api.test/post?id=" + id, body: body,
			want: sha256.Sum256([]byte(hex.EncodeToString(sum[:]))), wantLen: 64, deadline: 15 * time.Second}
	default: // a stream that stays open
		chunks := 8 + rng.IntN(40)
		n := int64(chunks * streamChunk)
		return obj("stream", fmt.Sprintf("https://api.test/stream?chunks=%d&every=250ms&id=%s", chunks, id), n,
			time.Duration(chunks)*250*time.Millisecond+15*time.Second)
	}
}

// soakOutcome is what one request gave its caller.
type soakOutcome struct {
	kind         string
	start, end   time.Duration // since the schedule's start
	err          error
	cancelled    bool          // it failed because the caller cancelled it
	stall        time.Duration // the longest wait for the next bytes
	late         bool          // returned later than its deadline allows
	count        string        // X-Count of a POST's answer
	wrong        string        // set if the body was not the one sent
	wantDeadline time.Duration
	faults       string // active during it
	where        string // the response's protocol and the bytes read, once headers came
}

// hangGrace is how long past its deadline a request may take to return.
const hangGrace = 2 * time.Second

// classify names the kind of a request's error, as a caller would tell
// it: by errors.Is and errors.As, never by its text. "" is an error no
// caller could classify.
func classify(err error) string {
	var dnsErr *net.DNSError
	var appErr *quic.ApplicationError
	var transportErr *quic.TransportError
	var idleErr *quic.IdleTimeoutError
	var handshakeErr *quic.HandshakeTimeoutError
	var statelessReset *quic.StatelessResetError
	var netErr net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, intents.ErrNoPath):
		return "no permitted path"
	case errors.Is(err, intents.ErrPathDown):
		return "path went down"
	case errors.As(err, &dnsErr):
		return "DNS"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED):
		return "reset"
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETDOWN),
		errors.Is(err, syscall.EADDRNOTAVAIL), errors.Is(err, syscall.ENODEV):
		return "unreachable"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "cut short"
	case errors.Is(err, net.ErrClosed):
		return "connection closed"
	case errors.Is(err, intents.ErrUnprocessed):
		return "not processed"
	case errors.As(err, &appErr), errors.As(err, &transportErr), errors.As(err, &statelessReset):
		return "QUIC closed"
	case errors.As(err, &idleErr), errors.As(err, &handshakeErr):
		return "QUIC timeout"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	}
	return ""
}

// soakTally sums outcomes over a span of the run.
type soakTally struct {
	requests, failed int
	cancelled        int // by the caller, at a random moment
	byKind           map[string]int
	byClass          map[string]int
	byFault          map[string]int // failures, by each fault active then
	stall            soakOutcome    // the longest-stalled request
	unclassified     []string
	problems         []string // wrong bodies, duplicates, hangs
	failures         []string // each failure, for the log
}

func newTally() *soakTally {
	return &soakTally{byKind: map[string]int{}, byClass: map[string]int{}, byFault: map[string]int{}}
}

func (t *soakTally) add(o soakOutcome, schedule []fault) {
	faults := activeFaults(schedule, o.start, o.end)
	o.faults = fmt.Sprint(faults)
	t.requests++
	t.byKind[o.kind]++
	if o.stall > t.stall.stall {
		t.stall = o
	}
	switch {
	case o.wrong != "":
		t.problems = append(t.problems, fmt.Sprintf("%s at %v (faults %s): %s", o.kind, o.start.Round(time.Millisecond), o.faults, o.wrong))
	case o.count != "" && o.count != "1":
		t.problems = append(t.problems, fmt.Sprintf("%s at %v: the server saw it %s times", o.kind, o.start.Round(time.Millisecond), o.count))
	}
	if o.late {
		t.problems = append(t.problems, fmt.Sprintf("%s at %v returned after %v, deadline %v: %v", o.kind, o.start.Round(time.Millisecond),
			(o.end-o.start).Round(time.Millisecond), o.wantDeadline, o.err))
	}
	if o.err == nil {
		return
	}
	if o.cancelled {
		t.cancelled++ // the caller's own doing
		return
	}
	t.failed++
	class := classify(o.err)
	if class == "" {
		class = "unclassified"
		t.unclassified = append(t.unclassified, fmt.Sprintf("%s at %v (faults %s; %s): %T: %v", o.kind, o.start.Round(time.Millisecond), o.faults, o.where, o.err, o.err))
	}
	t.byClass[class]++
	t.failures = append(t.failures, fmt.Sprintf("%s at %v after %v: %s (faults %s; %s): %v", o.kind, o.start.Round(time.Millisecond),
		(o.end-o.start).Round(time.Millisecond), class, o.faults, o.where, o.err))
	if len(faults) == 0 {
		t.byFault["none"]++
	}
	for _, k := range faults {
		t.byFault[k.String()]++
	}
}

func (t *soakTally) merge(o *soakTally) {
	t.requests += o.requests
	t.failed += o.failed
	t.cancelled += o.cancelled
	for _, m := range [][2]map[string]int{{t.byKind, o.byKind}, {t.byClass, o.byClass}, {t.byFault, o.byFault}} {
		for k, v := range m[1] {
			m[0][k] += v
		}
	}
	if o.stall.stall > t.stall.stall {
		t.stall = o.stall
	}
	t.unclassified = append(t.unclassified, o.unclassified...)
	t.problems = append(t.problems, o.problems...)
}

// String is the tally as one report line.
func (t *soakTally) String() string {
	counts := func(m map[string]int) string {
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range m {
				if !yield(k) {
					return
				}
			}
		})
		var b strings.Builder
		for i, k := range keys {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %d", k, m[k])
		}
		return b.String()
	}
	share := 0.0
	if t.requests > 0 {
		share = 100 * float64(t.failed) / float64(t.requests)
	}
	return fmt.Sprintf("%d requests (%s); %d cancelled by the caller; %d failed (%.1f %%): by error %s; by fault active %s; longest stall %v (%s at %v, faults %s)",
		t.requests, counts(t.byKind), t.cancelled, t.failed, share, counts(t.byClass), counts(t.byFault),
		t.stall.stall.Round(time.Millisecond), t.stall.kind, t.stall.start.Round(time.Second), t.stall.faults)
}

// soakSample is the client process at rest between spans of load.
type soakSample struct {
	at         time.Duration
	goroutines int
	fds        int
	heap       uint64
	conns      int
}

func (s soakSample) String() string {
	return fmt.Sprintf("goroutines %d, fds %d, heap %.1f MiB, pooled connections %d", s.goroutines, s.fds, float64(s.heap)/(1<<20), s.conns)
}

// pooledAtRest closes tr's idle connections until none is left, for at
// most 5 s, and returns how many are pooled then: a spare connection or a
// probe's dial the pool started in the load's last moments may land after
// the first close.
func pooledAtRest(tr *intents.Transport) int {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(5 * time.Second); ; <-tick.C {
		tr.CloseIdleConnections()
		n := 0
		for _, ps := range tr.Stats() {
			n += ps.Idle + ps.Active
		}
		if n == 0 || time.Now().After(deadline) {
			return n
		}
	}
}

// settledGoroutines is the number of goroutines once it has held still
// for 200 ms (at most 5 s): the closed connections' goroutines end a
// moment after their Close.
func settledGoroutines() int {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	n, same := runtime.NumGoroutine(), 0
	for deadline := time.Now().Add(5 * time.Second); same < 10 && time.Now().Before(deadline); {
		<-tick.C
		if m := runtime.NumGoroutine(); m == n {
			same++
		} else {
			n, same = m, 0
		}
	}
	return n
}

func openFDs(t *testing.T) int {
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(fds)
}

// slopePerHour is the least-squares slope of ys over the samples' times.
func slopePerHour(samples []soakSample, y func(soakSample) float64) float64 {
	if len(samples) < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for _, s := range samples {
		x := s.at.Hours()
		sx, sy, sxx, sxy = sx+x, sy+y(s), sxx+x*x, sxy+x*y(s)
	}
	n := float64(len(samples))
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// TestNetnsSoakChild runs the soak's load: soakWorkers callers, each
// drawing requests from the mix one after another, in spans of a minute;
// between spans it lets the load finish, closes the idle connections and
// samples the process. At the end it closes the Transport and the Manager
// and checks that the goroutines and file descriptors are those it had
// before.
func TestNetnsSoakChild(t *testing.T) {
	fields := strings.Fields(testbed.ChildArg(t, "TestNetnsSoak"))
	require.Len(t, fields, 4)
	seed, err := strconv.ParseUint(fields[0], 10, 64)
	require.NoError(t, err)
	length, err := time.ParseDuration(fields[1])
	require.NoError(t, err)
	startNanos, err := strconv.ParseInt(fields[2], 10, 64)
	require.NoError(t, err)
	start := time.Unix(0, startNanos)
	roots, err := testbed.ReadPool(filepath.Join(fields[3], "ca.pem"))
	require.NoError(t, err)
	schedule := chaosSchedule(seed, length)

	cfg := intents.Config{Policy: &policy.EAF{}, Paths: []intents.PathConfig{
		{Interface: "p1", DNS: []string{"10.71.1.2"}}, {Interface: "p2", DNS: []string{"10.71.2.2"}}}}
	if name := os.Getenv("INTENTS_SOAK_LOG"); name != "" { // every decision, to trace a failure
		f, err := os.Create(name)
		require.NoError(t, err)
		defer f.Close()
		cfg.Logger = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	baseGoroutines := goleak.IgnoreCurrent()
	baseFDs := openFDs(t)
	m, err := intents.NewManager(cfg)
	require.NoError(t, err)
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.TLSClientConfig.RootCAs = roots
	tr := &intents.Transport{Manager: m, Base: base, HTTP3: &h3.Dialer{}}
	time.Sleep(time.Until(start)) // the load starts with the schedule, which the parent keeps

	total := newTally()
	var samples []soakSample
	for span := 0; time.Since(start) < length; span++ {
		end := start.Add(min(time.Duration(span+1)*time.Minute, length))
		tally := runSoakSpan(tr, seed, span, start, end, schedule)
		s := soakSample{at: time.Since(start), conns: pooledAtRest(tr)}
		s.goroutines, s.fds = settledGoroutines(), openFDs(t)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s.heap = ms.HeapAlloc
		samples = append(samples, s)
		t.Logf("minute %d: %.1f requests/s, %s; at rest: %s", span+1,
			float64(tally.requests)/time.Since(start.Add(time.Duration(span)*time.Minute)).Seconds(), tally, s)
		for _, f := range tally.failures {
			t.Log("\tfailed:", f)
		}
		total.merge(tally)
		assert.Zero(t, s.conns, "connections pooled after the load's requests ended and the idle ones were closed")
	}
	elapsed := time.Since(start)
	t.Logf("whole run, %v: %.1f requests/s; %s", elapsed.Round(time.Second), float64(total.requests)/elapsed.Seconds(), total)
	t.Logf("slopes per hour at rest: goroutines %+.1f, fds %+.1f, heap %+.2f MiB", slopePerHour(samples, func(s soakSample) float64 { return float64(s.goroutines) }),
		slopePerHour(samples, func(s soakSample) float64 { return float64(s.fds) }),
		slopePerHour(samples, func(s soakSample) float64 { return float64(s.heap) / (1 << 20) }))
	for _, p := range total.problems {
		t.Error(p)
	}
	for _, u := range total.unclassified {
		t.Errorf("an error no caller can classify: %s", u)
	}
	assert.Positive(t, total.requests-total.failed, "requests completed")

	require.NoError(t, tr.Close())
	require.NoError(t, m.Close())
	assert.NoError(t, goleak.Find(baseGoroutines), "goroutines left after Close")
	assert.Equal(t, baseFDs, openFDs(t), "file descriptors open after Close")
}

// soakWorkers is how many callers the load has.
const soakWorkers = 6

// runSoakSpan runs the load until end and waits for its last requests.
func runSoakSpan(tr *intents.Transport, seed uint64, span int, start, end time.Time, schedule []fault) *soakTally {
	var mu sync.Mutex
	tally := newTally()
	var wg sync.WaitGroup
	for w := range soakWorkers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(span*soakWorkers+w)))
			for i := 0; time.Now().Before(end); i++ {
				req := nextRequest(rng, fmt.Sprintf("s%d-%d-%d-%d", seed, span, w, i))
				var cancelAt time.Duration
				if rng.IntN(10) == 0 {
					cancelAt = time.Duration(rng.Int64N(int64(3 * time.Second)))
				}
				o := doSoakRequest(tr, req, cancelAt, start)
				mu.Lock()
				tally.add(o, schedule)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return tally
}

// doSoakRequest sends req, reads its body to the end and checks it; it
// cancels the request after cancelAt if that is positive.
func doSoakRequest(tr *intents.Transport, req soakRequest, cancelAt time.Duration, start time.Time) soakOutcome {
	o := soakOutcome{kind: req.kind, start: time.Since(start), wantDeadline: req.deadline}
	ctx, cancel := context.WithTimeout(intents.WithIntents(context.Background(), req.in), req.deadline)
	defer cancel()
	var fired atomic.Bool // set before the cancellation, so an error it caused sees it
	if cancelAt > 0 {
		timer := time.AfterFunc(cancelAt, func() {
			fired.Store(true)
			cancel()
		})
		defer timer.Stop()
	}
	last := time.Now()
	r, err := http.NewRequestWithContext(ctx, req.method, req.url, nil)
	if err != nil {
		o.err = err
		return o
	}
	if req.body != nil {
		r, err = http.NewRequestWithContext(ctx, req.method, req.url, bytes.NewReader(req.body))
		if err != nil {
			o.err = err
			return o
		}
	}
	var got [32]byte
	var n int64
	resp, err := tr.RoundTrip(r)
	if err == nil {
		h := sha256.New()
		buf := make([]byte, 32<<10)
		for {
			k, rerr := resp.Body.Read(buf)
			if k > 0 {
				now := time.Now()
				o.stall = max(o.stall, now.Sub(last))
				last = now
				h.Write(buf[:k])
				n += int64(k)
			}
			if rerr != nil {
				if rerr != io.EOF {
					err = rerr
				}
				break
			}
		}
		resp.Body.Close()
		h.Sum(got[:0])
		o.count = resp.Header.Get("X-Count")
		o.where = fmt.Sprintf("%s, %d of %d bytes read", resp.Proto, n, req.wantLen)
		if err == nil && resp.StatusCode != http.StatusOK {
			o.wrong = fmt.Sprintf("status %d", resp.StatusCode)
		}
	}
	o.end = time.Since(start)
	o.err = err
	o.late = o.end-o.start > req.deadline+hangGrace
	if err == nil && o.wrong == "" && (n != req.wantLen || got != req.want) {
		o.wrong = fmt.Sprintf("%d bytes, want %d; SHA-256 %x, want %x (%s)", n, req.wantLen, got[:4], req.want[:4], req.url)
	}
	o.cancelled = err != nil && errors.Is(err, context.Canceled) && fired.Load()
	return o
}

// The chaos schedule is the seed's: the same seed gives the same faults
// (a failing run replays), another seed others; no fault of a kind
// starts on a path while one of that kind is active there.
func TestChaosScheduleIsTheSeeds(t *testing.T) {
	a, b := chaosSchedule(7, time.Hour), chaosSchedule(7, time.Hour)
	require.Equal(t, a, b)
	assert.NotEqual(t, a, chaosSchedule(8, time.Hour))
	assert.Greater(t, len(a), 600, "a fault every 2 to 6 s")
	kinds := map[faultKind]bool{}
	for i, f := range a {
		kinds[f.kind] = true
		if i > 0 {
			assert.Greater(t, f.at, a[i-1].at)
		}
		for _, g := range a[:i] {
			if g.kind == f.kind && g.path == f.path && f.path >= 0 {
				assert.LessOrEqual(t, g.at+g.dur, f.at, "%v overlaps %v", f, g)
			}
		}
	}
	assert.Len(t, kinds, int(numFaults), "every kind of fault")
}
