//go:build linux

package main

// The failover experiment (-failover): a 4 MB download preferring path 1,
// which is cut once it has carried 1 MB of the transfer, by a link event
// (the client's device goes down) or as a blackhole (the link stays up,
// every packet is lost both ways), for each way this library (or the
// kernel) can carry a transfer on over path 2. Measured per cut: the gap
// from the cut until path 2 carried 4 KiB more of the transfer than at
// the cut (the emulated link counts; a mechanism that used path 2 before
// the cut has no such gap), the longest the reader waited for a
// byte, and the delay the cut added to the transfer (its time against the
// median of uncut transfers of the same mechanism, in the same run).

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/h3"
	"github.com/sockintents/intents/internal/testbed"
)

const failoverEnv = "INTENTS_FAILOVER_CHILD"

// The failover testbed: path 1 nearer than path 2, both 20 Mbit/s
// (-failover-path1 sets path 1 to another, as one that follows a trace).
var failoverPaths = []testbed.PathSpec{testbed.Symmetric(20*time.Millisecond, 20e6), testbed.Symmetric(40*time.Millisecond, 20e6)}

const (
	failoverSize  = 4_000_000
	failoverCutAt = 1_000_000 // bytes path 1 carried down before the cut
	// failoverResumed is what path 2 carries after the cut for the
	// transfer to count as going on there: more than a handshake's or a
	// path probe's packets, less than a new connection's first flight.
	failoverResumed = 4 << 10
	// failoverTimeout bounds one transfer: a mechanism that never carries
	// on is recorded as failed.
	failoverTimeout = 30 * time.Second
)

// The mechanisms, in the order of the table.
var (
	failoverMechanisms = []string{"retry", "resume", "twostep", "aggregate", "mptcp", "quic"}
	mechanismNames     = map[string]string{
		// A response that cannot be resumed (no validator, no ranges):
		// the Transport fails it with ErrPathDown, and the program asks
		// for all of it again.
		"retry": "GET sent again on path 2 (intents)",
		// The same GET of a static object: the Transport resumes it.
		"resume":    "GET resumed on path 2 (intents)",
		"twostep":   "two-step download, resumed (intents)",
		"aggregate": "aggregated download (intents)",
		"mptcp":     "MPTCP, backup subflow on path 2 (kernel)",
		"quic":      "HTTP/3, QUIC migration (intents)",
	}
	cutKinds = []string{"link", "blackhole"}
)

// failoverRun is one transfer, as the parent asks the child for it.
type failoverRun struct {
	Mechanism, Cut string // Cut "" for an uncut transfer
	Rep            int
	CA             []byte // the web server's CA certificate, DER (HTTP/3)
}

// failoverResult is one measured transfer.
type failoverResult struct {
	Mechanism, Cut string
	Rep            int
	Duration       time.Duration // request to the body's last byte
	Stall          time.Duration // the longest the reader waited for a byte
	Gap            time.Duration // cut to path 2 carrying on (parent's; 0: never)
	// Path2Before is what path 2 carried down from the start of the
	// transfer to the cut (parent's).
	Path2Before int64
	Err         string // the transfer failed, or its body was not byte-exact
}

// failover runs cuts cuts of each kind for every mechanism, and uncut
// transfers of each, for the added delay.
func failover(mechanisms []string, cuts, uncut int) ([]failoverResult, error) {
	tb, err := testbed.Start(testbed.Spec{Paths: failoverPaths, MPTCP: &testbed.MPTCPSpec{}})
	if err != nil {
		return nil, err
	}
	defer tb.Close()
	web, err := tb.StartWeb(testbed.WebOptions{HTTP3: true})
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("ip", "netns", "exec", tb.Client.Name, self)
	cmd.Env = append(os.Environ(), failoverEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			log.Printf("failover client: %v", err)
		}
	}()
	enc, dec := json.NewEncoder(stdin), json.NewDecoder(bufio.NewReader(stdout))
	ca := web.CA.Cert.Certificate[len(web.CA.Cert.Certificate)-1]
	var runs []failoverRun
	for rep := range uncut {
		for _, m := range mechanisms {
			runs = append(runs, failoverRun{Mechanism: m, Rep: rep})
		}
	}
	// Round the mechanisms within each rep, so a slow spell of this
	// shared machine hits them alike.
	for rep := range cuts {
		for _, cut := range cutKinds {
			for _, m := range mechanisms {
				runs = append(runs, failoverRun{Mechanism: m, Cut: cut, Rep: rep})
			}
		}
	}
	var results []failoverResult
	p1, p2 := tb.Paths[0], tb.Paths[1]
	for i, run := range runs {
		progress(i, len(runs), "failover: "+run.Mechanism+" "+run.Cut)
		run.CA = ca
		// A traced path 1: every mechanism's transfer r starts at the
		// same trace position, and successive ones a stride apart.
		startTraces(tb, scenario{Paths: failoverPaths}, run.Rep)
		var mu sync.Mutex
		var cutAt, resumedAt time.Time
		var armed atomic.Bool // hooks left over from a transfer that ended uncut do nothing
		armed.Store(run.Cut != "")
		p2Start := p2.Down.Stats().Bytes
		var p2AtCut int64
		if run.Cut != "" {
			p1.Down.OnBytes(p1.Down.Stats().Bytes+failoverCutAt, func() {
				if !armed.Load() {
					return
				}
				if run.Cut == "link" {
					if err := tb.SetLinkUp(p1, false); err != nil {
						log.Printf("failover: path 1 down: %v", err)
					}
				} else {
					p1.SetDown(true)
				}
				at := time.Now()
				p2Bytes := p2.Down.Stats().Bytes
				mu.Lock()
				cutAt, p2AtCut = at, p2Bytes
				mu.Unlock()
				p2.Down.OnBytes(p2Bytes+failoverResumed, func() {
					if armed.Load() {
						mu.Lock()
						resumedAt = time.Now()
						mu.Unlock()
					}
				})
			})
		}
		if err := enc.Encode(run); err != nil {
			return nil, fmt.Errorf("failover client: %w", err)
		}
		var res failoverResult
		if err := dec.Decode(&res); err != nil {
			return nil, fmt.Errorf("failover client: %w", err)
		}
		armed.Store(false)
		mu.Lock()
		switch {
		case run.Cut != "" && cutAt.IsZero():
			res.Err = cmp.Or(res.Err, "path 1 never carried 1 MB of the transfer")
		case run.Cut != "" && !resumedAt.IsZero():
			res.Gap = resumedAt.Sub(cutAt)
		}
		if !cutAt.IsZero() {
			res.Path2Before = p2AtCut - p2Start
		}
		mu.Unlock()
		results = append(results, res)
		// Path 1 as it was, for the next transfer.
		p1.SetDown(false)
		if run.Cut == "link" {
			if err := tb.SetLinkUp(p1, true); err != nil {
				return nil, err
			}
		}
	}
	progress(0, 0, "")
	return results, nil
}

// failoverClient is the client half, inside the client namespace: one
// transfer per run read from stdin, one result per run to stdout.
func failoverClient() {
	dec, enc := json.NewDecoder(os.Stdin), json.NewEncoder(os.Stdout)
	for {
		var run failoverRun
		if err := dec.Decode(&run); err == io.EOF {
			return
		} else if err != nil {
			log.Fatal(err)
		}
		res := transfer(run)
		if err := enc.Encode(res); err != nil {
			log.Fatal(err)
		}
	}
}

// transfer downloads the object once with run's mechanism, on a Manager
// and transport of its own, preferring path 1.
func transfer(run failoverRun) failoverResult {
	res := failoverResult{Mechanism: run.Mechanism, Cut: run.Cut, Rep: run.Rep}
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}},
		MPTCPEndpoints: run.Mechanism == "mptcp"})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	if err := awaitUp(m, "p1"); err != nil {
		log.Fatal(err)
	}
	prefer1 := intents.Intents{Interfaces: map[string]intents.Level{"p1": intents.LevelPrefer}}
	url := fmt.Sprintf("http://10.71.100.1/obj/%d", failoverSize)
	var rt http.RoundTripper
	if run.Mechanism == "retry" {
		url += "?dynamic"
	}
	switch run.Mechanism {
	case "retry", "resume", "twostep", "aggregate":
		tr := &intents.Transport{Manager: m}
		switch run.Mechanism {
		case "twostep":
			tr.TwoStep = 8 << 10
		case "aggregate":
			tr.Aggregate = &intents.Aggregate{}
		}
		defer tr.Close()
		rt = tr
	case "quic":
		tr := &intents.Transport{Manager: m, HTTP3: &h3.Dialer{}, HTTP3Always: true, HTTP3RaceDelay: -1,
			Base: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool(run.CA)}}}
		defer tr.Close()
		rt = tr
		url = strings.Replace(url, "http:", "https:", 1)
	case "mptcp":
		d := &intents.Dialer{Manager: m}
		in := prefer1
		in.Multipath = intents.MultipathHandover
		tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(intents.WithIntents(ctx, in), network, addr)
		}}
		defer tr.CloseIdleConnections()
		rt = tr
	default:
		log.Fatalf("unknown mechanism %q", run.Mechanism)
	}
	ctx, cancel := context.WithTimeout(intents.WithIntents(context.Background(), prefer1), failoverTimeout)
	defer cancel()
	r := &stallReader{last: time.Now()}
	start := time.Now()
	n, sum, err := fetch(ctx, rt, url, r)
	if err != nil && errors.Is(err, intents.ErrPathDown) && run.Mechanism == "retry" {
		// What a program does with a transfer its path lost: ask again.
		n, sum, err = fetch(ctx, rt, url, r)
	}
	res.Duration, res.Stall = time.Since(start), r.longest
	switch {
	case err != nil:
		res.Err = err.Error()
	case n != failoverSize || sum != testbed.ObjectSum(failoverSize):
		res.Err = fmt.Sprintf("%d bytes, not byte for byte the object", n)
	}
	return res
}

// awaitUp waits until m sees the named path up (after a link event, the
// device comes back before its routes and addresses are all there).
func awaitUp(m *intents.Manager, name string) error {
	deadline := time.After(10 * time.Second)
	for {
		changed := m.Changed()
		if p := m.Path(name); p != nil && p.Up && len(p.Addrs) > 0 {
			return nil
		}
		select {
		case <-changed:
		case <-deadline:
			return fmt.Errorf("path %s not up", name)
		}
	}
}

// stallReader notes the longest wait between bytes of the bodies it reads.
type stallReader struct {
	last    time.Time
	longest time.Duration
}

func (s *stallReader) read(body io.Reader, p []byte) (int, error) {
	n, err := body.Read(p)
	if n > 0 {
		now := time.Now()
		s.longest = max(s.longest, now.Sub(s.last))
		s.last = now
	}
	return n, err
}

// fetch GETs url and hashes its body.
func fetch(ctx context.Context, rt http.RoundTripper, url string, s *stallReader) (int64, [32]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, [32]byte{}, err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, [32]byte{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, [32]byte{}, fmt.Errorf("status %s", resp.Status)
	}
	h := sha256.New()
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := s.read(resp.Body, buf)
		h.Write(buf[:k])
		n += int64(k)
		if err == io.EOF {
			return n, [32]byte(h.Sum(nil)), nil
		}
		if err != nil {
			return n, [32]byte{}, err
		}
	}
}

// failoverGoal is #19's goal for the gap: one path-2 RTT plus 50 ms after
// a link event; three of path 1's smoothed RTTs (at least 200 ms) plus a
// path-2 RTT after a blackhole. Path 1's smoothed RTT under the transfer
// is at most twice its base RTT (its queue holds one BDP).
func failoverGoal(cut string) time.Duration {
	rtt1, rtt2 := failoverPaths[0].RTT(), failoverPaths[1].RTT()
	if cut == "link" {
		return rtt2 + 50*time.Millisecond
	}
	return max(3*2*rtt1, 200*time.Millisecond) + rtt2
}

// rateOf says a path's downlink rate: fixed, or its trace's and mean.
func rateOf(p testbed.PathSpec) string {
	if t := p.Down.Trace; t != nil {
		return fmt.Sprintf("trace %s, mean %.1f Mbit/s", t.Name, float64(t.MeanRate())/1e6)
	}
	return fmt.Sprintf("%g Mbit/s", float64(p.Down.Rate)/1e6)
}

// failoverSummary is one mechanism's figures for one kind of cut.
type failoverSummary struct {
	mechanism, cut       string
	gaps, stalls, added  []time.Duration // sorted
	failed, neverResumed int
	usedPath2            int // transfers that had path 2 carry 64 KiB or more before the cut
	errs                 []string
}

func summarize(results []failoverResult, mechanisms []string) []failoverSummary {
	base := map[string][]time.Duration{}
	for _, r := range results {
		if r.Cut == "" && r.Err == "" {
			base[r.Mechanism] = append(base[r.Mechanism], r.Duration)
		}
	}
	var out []failoverSummary
	for _, cut := range cutKinds {
		for _, m := range mechanisms {
			s := failoverSummary{mechanism: m, cut: cut}
			b := base[m]
			slices.Sort(b)
			for _, r := range results {
				if r.Mechanism != m || r.Cut != cut {
					continue
				}
				if r.Err != "" {
					s.failed++
					s.errs = append(s.errs, r.Err)
					continue
				}
				switch {
				case r.Path2Before >= 64<<10:
					s.usedPath2++ // the gap is no failover's: path 2 was busy with it
				case r.Gap == 0:
					s.neverResumed++
				default:
					s.gaps = append(s.gaps, r.Gap)
				}
				s.stalls = append(s.stalls, r.Stall)
				if len(b) > 0 {
					s.added = append(s.added, r.Duration-median(b))
				}
			}
			slices.Sort(s.gaps)
			slices.Sort(s.stalls)
			slices.Sort(s.added)
			out = append(out, s)
		}
	}
	return out
}

// printFailover writes the table: medians, with min–max.
func printFailover(w io.Writer, sums []failoverSummary, cuts int) {
	fmt.Fprintf(w, "\nfailover: %d MB GET preferring path 1 (%v, %s), cut after %d MB; path 2 %v, %s; %d cuts of each kind\n",
		failoverSize/1_000_000, failoverPaths[0].RTT(), rateOf(failoverPaths[0]), failoverCutAt/1_000_000,
		failoverPaths[1].RTT(), rateOf(failoverPaths[1]), cuts)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  cut\tmechanism\tgap to path 2 (median, min–max)\tgoal\tlongest stall\tadded delay\tfailed\t")
	for _, s := range sums {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t≤ %s\t%s\t%s\t%d of %d\t\n", s.cut, mechanismNames[s.mechanism], spread(s.gaps),
			ms(failoverGoal(s.cut)), spread(s.stalls), spread(s.added), s.failed, s.failed+len(s.stalls))
	}
	tw.Flush()
	for _, s := range sums {
		if s.neverResumed > 0 {
			fmt.Fprintf(w, "  %s, %s: path 2 carried less than 4 KiB after %d cuts\n", s.cut, mechanismNames[s.mechanism], s.neverResumed)
		}
		if s.usedPath2 > 0 {
			fmt.Fprintf(w, "  %s, %s: path 2 carried the transfer before %d cuts already: no gap to measure there\n", s.cut, mechanismNames[s.mechanism], s.usedPath2)
		}
		for _, e := range s.errs {
			fmt.Fprintf(w, "  %s, %s failed: %s\n", s.cut, mechanismNames[s.mechanism], e)
		}
	}
}

func ms(d time.Duration) string {
	return strconv.FormatInt(d.Round(time.Millisecond).Milliseconds(), 10) + " ms"
}

// spread is "median (min–max)" of sorted durations, or "–".
func spread(d []time.Duration) string {
	if len(d) == 0 {
		return "–"
	}
	return fmt.Sprintf("%s (%s–%s)", ms(median(d)), strings.TrimSuffix(ms(d[0]), " ms"), ms(d[len(d)-1]))
}

// writeFailover saves failover.csv (every transfer) and failover.svg/.png
// (the median gaps, against the goals).
func writeFailover(dir string, results []failoverResult, sums []failoverSummary) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rows := [][]string{{"mechanism", "cut", "rep", "duration_s", "gap_s", "longest_stall_s", "path2_bytes_before_cut", "error"}}
	for _, r := range results {
		cut := r.Cut
		if cut == "" {
			cut = "none"
		}
		rows = append(rows, []string{r.Mechanism, cut, strconv.Itoa(r.Rep), secs(r.Duration), secs(r.Gap), secs(r.Stall), strconv.FormatInt(r.Path2Before, 10), r.Err})
	}
	if err := writeCSV(filepath.Join(dir, "failover.csv"), rows); err != nil {
		return err
	}
	if err := plotFailover(filepath.Join(dir, "failover.svg"), "Failover: from the cut of path 1 to 4 KiB more on path 2", sums,
		func(s failoverSummary) []time.Duration { return s.gaps }); err != nil {
		return err
	}
	return plotFailover(filepath.Join(dir, "failover-stall.svg"), "Failover: the reader's longest wait for a byte", sums,
		func(s failoverSummary) []time.Duration { return s.stalls })
}

// plotFailover draws pick's durations of every mechanism and kind of cut:
// every cut a point, the median a bar across them, the goal dashed; link
// events left of each mechanism's tick, blackholes right.
func plotFailover(name, title string, sums []failoverSummary, pick func(failoverSummary) []time.Duration) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "milliseconds"
	var labels []string
	for _, s := range sums {
		if s.cut == cutKinds[0] {
			labels = append(labels, s.mechanism)
		}
	}
	for i, cut := range cutKinds {
		var pts plotter.XYs
		j := 0
		for _, s := range sums {
			if s.cut != cut {
				continue
			}
			x := float64(j) + (float64(i)-0.5)*0.3
			for _, g := range pick(s) {
				pts = append(pts, plotter.XY{X: x, Y: float64(g.Milliseconds())})
			}
			if len(pick(s)) > 0 {
				y := float64(median(pick(s)).Milliseconds())
				mid, err := plotter.NewLine(plotter.XYs{{X: x - 0.12, Y: y}, {X: x + 0.12, Y: y}})
				if err != nil {
					return err
				}
				mid.Color, mid.Width = plotutil.Color(i), vg.Points(2)
				p.Add(mid)
			}
			j++
		}
		if len(pts) > 0 {
			sc, err := plotter.NewScatter(pts)
			if err != nil {
				return err
			}
			sc.Color = plotutil.Color(i)
			sc.Radius = vg.Points(2)
			p.Add(sc)
			p.Legend.Add(cut+" (goal "+ms(failoverGoal(cut))+", dashed)", sc)
		}
		y := float64(failoverGoal(cut).Milliseconds())
		goal, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: y}, {X: float64(len(labels)) - 0.5, Y: y}})
		if err != nil {
			return err
		}
		goal.Color = plotutil.Color(i)
		goal.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(goal)
	}
	p.Add(plotter.NewGrid())
	p.Legend.Top, p.Legend.Left = true, true
	p.Y.Min = 0
	p.Y.Max *= 1.2 // room for the legend
	p.NominalX(labels...)
	return saveBoth(p, 7*vg.Inch, 4*vg.Inch, name)
}
