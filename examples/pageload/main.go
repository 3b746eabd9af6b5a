//go:build linux

// Command pageload loads web pages over the emulated two-path testbed with
// several contenders and compares their page load times: the Socket Intents
// paper's experiment, on real sockets. It needs root (network namespaces).
//
//	sudo go run ./examples/pageload       # symmetric and asymmetric, 32 × 100 KB
//	sudo go run ./examples/pageload -scenario grid -workload mixed1,16x10KB
//	sudo go run ./examples/pageload -scenario 20M/10ms+5M/100ms -workload internal/pageload/testdata/news.har
//	sudo go run ./examples/pageload -failover -cuts 10   # failover mechanisms, path 1 cut mid-download
//	sudo go run ./examples/pageload -browser -reps 10   # headless Chromium through the proxy, beside net/http
//
// Scenarios are the testbed presets (symmetric: 50 ms / 6 Mbit/s and
// 50 ms / 5 Mbit/s; asymmetric: 20 ms / 12 Mbit/s and 100 ms / 5 Mbit/s),
// "grid" (six cells of the paper's factor levels), "papergrid" (a fixed,
// balanced sample of 48 of the paper's cells, with its own pages,
// contenders and loads unless told: see papergridCells), "papergrid2"
// (a second fixed sample of 48, drawn at random: see papergrid2Cells),
// "gridcheck" (an eighth of papergrid), "paper" (all 384 cells of them;
// -sample N picks N at random) or cells written RATE/RTT+RATE/RTT. With -prune (papergrid's default) a single path that
// cannot be a cell's better one by arithmetic is left out (see leftOut).
// Workloads are NxSIZE, mixed1, mixed2 or HAR files. -queue sets the
// emulated links' drop-tail queues in bandwidth-delay products: by default
// 1, and 4 for the grids, whose small pages would otherwise measure the
// retransmission timeouts of six connections slow-starting into a shallow
// queue more than anything else (see BENCHMARKS.md). Every table and CSV
// row says which, and how many loads waited for a retransmission timeout
// at the server. -conns sets every contender's connections per host (a
// browser's 6 by default), -split how many of them the split contender
// (a reference told everything, see staticSplit) keeps on path 1. Each
// cell's page load times are set against its lower bound (the links'
// rates) and, where path 1 and path 2 alone ran, against their own loads
// split as a fluid (what TCP made of the paths; see fluidSplit). Where
// path 1, path 2 and round robin ran, each other contender is tested as
// issue #17 asks (its median within 3 % of their best, its p90 within
// 10 %), with a bootstrap interval and the test's own noise: how often a
// twin of the best baseline would pass (see goal). Over more than a few
// cells, each contender is tested by the paper's own rule against the
// better single path (see testPaper). Tables go to stdout, a
// progress bar to stderr, CSV files and SVG plots to -out.
//
// With -browser (or browser-* contenders), headless Chromium loads each
// page as real HTML (see pageload.Site) through the proxy, a new browser,
// profile and proxy each load, from a namespace whose only route leads to
// the proxy (see testbed.Isolated); its load time is the browser's own
// (Navigation Timing), its bytes and paths come from the web servers' log,
// and it is set against the browser's own single paths over the same
// protocol (see browserTests).
//
// With -parallel N, up to N cells run at once, each on a testbed of its
// own; every load records the emulators' lateness during it, and a load
// during which they could not keep time is loaded again (see
// measureInTime). -agree compares the runs in several -out folders (see
// agree): whether a parallel run's verdicts agree with serial runs' as
// well as those agree with each other.
//
// The server side (link emulator, web servers) runs in this process; the
// client side runs as a copy of this program inside the client namespace,
// so every socket it opens belongs there.
package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sockintents/intents/internal/pageload"
	"github.com/sockintents/intents/internal/testbed"
)

const childEnv = "INTENTS_PAGELOAD_CHILD"

// scenario is one setting of the testbed's two paths.
type scenario struct {
	Name  string
	Paths []testbed.PathSpec
	// QueueBDP is the drop-tail queue of every link direction, in
	// bandwidth-delay products of its path (0: the testbed's default, 1).
	QueueBDP float64
	// Prune leaves out the single paths that cannot be a cell's better
	// one by arithmetic (see leftOut).
	Prune bool
}

// withQueue sets the drop-tail queues to bdps bandwidth-delay products
// (at least testbed.MinQueue, as the testbed's default).
func (sc scenario) withQueue(bdps float64) scenario {
	paths := slices.Clone(sc.Paths)
	for i := range paths {
		rtt := paths[i].RTT().Seconds()
		for _, l := range []*testbed.LinkParams{&paths[i].Up, &paths[i].Down} {
			l.Queue = max(int(bdps*float64(l.MeanRate())*rtt/8), testbed.MinQueue)
		}
	}
	sc.Paths, sc.QueueBDP = paths, bdps
	return sc
}

// traced reports whether a path of the scenario follows a trace.
func (sc scenario) traced() bool {
	return slices.ContainsFunc(sc.Paths, func(p testbed.PathSpec) bool { return p.Down.Trace != nil || p.Up.Trace != nil })
}

// queueBDP is the scenario's queue depth in bandwidth-delay products.
func (sc scenario) queueBDP() float64 {
	if sc.QueueBDP == 0 {
		return 1
	}
	return sc.QueueBDP
}

func cell(rate1 float64, rtt1 int, rate2 float64, rtt2 int) scenario {
	name := fmt.Sprintf("%gM/%dms+%gM/%dms", rate1, rtt1, rate2, rtt2)
	return scenario{Name: name, Paths: []testbed.PathSpec{
		testbed.Symmetric(time.Duration(rtt1)*time.Millisecond, int64(rate1*1e6)),
		testbed.Symmetric(time.Duration(rtt2)*time.Millisecond, int64(rate2*1e6))}}
}

// gridQueue is the grids' queue depth in BDPs. At one BDP, six
// connections slow-starting at once overflow the queue and most loads of
// a sub-second page wait for a retransmission timeout (200 ms or more), so
// that a cell's median of five loads is uncertain by ±15 %.
const gridQueue = 4

// The paper's factor levels (Section 5.1): interface 1 is the faster,
// closer one (as a Wi-Fi), interface 2 the slower, farther (as an LTE).
var (
	levels1Rate = []float64{0.5, 2, 6, 12, 20, 50}
	levels1RTT  = []int{10, 20, 30, 50}
	levels2Rate = []float64{0.5, 5, 20, 50}
	levels2RTT  = []int{20, 50, 100, 200}
)

// presets are the named scenarios and grids.
func presets(name string) ([]scenario, bool) {
	switch name {
	case "symmetric":
		return []scenario{{Name: "symmetric", Paths: []testbed.PathSpec{testbed.Symmetric(50*time.Millisecond, 6e6), testbed.Symmetric(50*time.Millisecond, 5e6)}}}, true
	case "asymmetric":
		return []scenario{{Name: "asymmetric", Paths: []testbed.PathSpec{testbed.Symmetric(20*time.Millisecond, 12e6), testbed.Symmetric(100*time.Millisecond, 5e6)}}}, true
	case "grid":
		// Corners and middle of the paper's levels that load in seconds:
		// a fast and a slow first interface against a near, slow and a
		// far, fast second one.
		var g []scenario
		for _, i1 := range []struct {
			rate float64
			rtt  int
		}{{2, 50}, {6, 20}, {20, 10}} {
			for _, i2 := range []struct {
				rate float64
				rtt  int
			}{{5, 50}, {20, 200}} {
				g = append(g, cell(i1.rate, i1.rtt, i2.rate, i2.rtt).withQueue(gridQueue))
			}
		}
		return g, true
	case "paper":
		var g []scenario
		for _, r1 := range levels1Rate {
			for _, d1 := range levels1RTT {
				for _, r2 := range levels2Rate {
					for _, d2 := range levels2RTT {
						g = append(g, cell(r1, d1, r2, d2).withQueue(gridQueue))
					}
				}
			}
		}
		return g, true
	case "papergrid":
		return papergrid(), true
	case "papergrid2":
		return papergrid2(), true
	case "gridcheck":
		return gridcheck(), true
	}
	return nil, false
}

// traceCells are the traces preset's cells: a wired-like path beside an
// LTE drive, two LTE carriers side by side, and a path beside EVDO (a
// nearly useless, erratic one), with the grids' queues, single paths
// pruned as in the paper grid (see leftOut).
var traceCells = []string{
	"10M/20ms+50ms/trace:Verizon-LTE-short",
	"50ms/trace:Verizon-LTE-short+50ms/trace:TMobile-LTE-short",
	"6M/20ms+100ms/trace:Verizon-EVDO-driving",
}

// defaultTraces is where the project's traces are, from a checkout's root.
const defaultTraces = "../shared/traces"

// parseScenarios reads a comma-separated list of presets and cells of
// two paths joined by "+", each path "RATE/RTT" (Mbit/s and ms, as
// 6M/20ms+5M/50ms) or "RTT/trace:NAME", a path whose links follow a
// cellular trace (NAME.down and NAME.up, in traces unless NAME is a path),
// as 20ms/trace:Verizon-LTE-short.
func parseScenarios(spec, traces string) ([]scenario, error) {
	var out []scenario
	for _, s := range strings.Split(spec, ",") {
		if p, ok := presets(s); ok {
			out = append(out, p...)
			continue
		}
		if s == "traces" {
			for _, c := range traceCells {
				p, err := parseScenarios(c, traces)
				if err != nil {
					return nil, err
				}
				sc := p[0].withQueue(gridQueue)
				sc.Prune = true // EVDO alone takes minutes for the large page
				out = append(out, sc)
			}
			continue
		}
		var paths []testbed.PathSpec
		for _, p := range strings.Split(s, "+") {
			ps, err := parsePath(p, traces)
			if err != nil {
				return nil, fmt.Errorf("scenario %q: want symmetric, asymmetric, grid, paper, papergrid, traces, or a cell of two paths: %w", s, err)
			}
			paths = append(paths, ps)
		}
		if len(paths) != 2 {
			return nil, fmt.Errorf("scenario %q: two paths, please", s)
		}
		out = append(out, scenario{Name: s, Paths: paths})
	}
	return out, nil
}

// parsePath reads one path of a cell: RATE/RTT or RTT/trace:NAME.
func parsePath(p, traces string) (testbed.PathSpec, error) {
	first, second, ok := strings.Cut(p, "/")
	if name, traced := strings.CutPrefix(second, "trace:"); ok && traced {
		rtt, err := time.ParseDuration(first)
		if err != nil || rtt <= 0 || name == "" {
			return testbed.PathSpec{}, fmt.Errorf("path %q: want RTT/trace:NAME (as 50ms/trace:Verizon-LTE-short)", p)
		}
		return tracedPath(rtt, name, traces)
	}
	r, err1 := strconv.ParseFloat(strings.TrimSuffix(strings.ToUpper(first), "M"), 64)
	d, err2 := time.ParseDuration(second)
	if !ok || err1 != nil || err2 != nil || r <= 0 || d <= 0 {
		return testbed.PathSpec{}, fmt.Errorf("path %q: want RATE/RTT or RTT/trace:NAME (as 6M/20ms or 50ms/trace:Verizon-LTE-short)", p)
	}
	return testbed.Symmetric(d, int64(r*1e6)), nil
}

// tracedPath is a path of round-trip time rtt (half each way) whose
// downlink follows trace NAME.down and uplink NAME.up, found in traces
// unless name has a folder of its own.
func tracedPath(rtt time.Duration, name, traces string) (testbed.PathSpec, error) {
	file := name
	if !strings.ContainsRune(name, filepath.Separator) {
		file = filepath.Join(traces, name)
	}
	down, err := testbed.ReadTrace(file + ".down")
	if err != nil {
		return testbed.PathSpec{}, err
	}
	up, err := testbed.ReadTrace(file + ".up")
	if err != nil {
		return testbed.PathSpec{}, err
	}
	return testbed.PathSpec{
		Up:   testbed.LinkParams{Delay: rtt / 2, Trace: up},
		Down: testbed.LinkParams{Delay: rtt / 2, Trace: down},
	}, nil
}

// config travels from the parent to the client process.
type config struct {
	Scenario   string
	Workloads  []pageload.Workload
	Contenders []string
	Reps       int
	Trace      string // the contender whose decisions are logged
	// ServerNetns names the server namespace, whose TCP counters tell
	// each load's retransmissions.
	ServerNetns string
	// The paths' settings, for the contenders given priors.
	RTT  []time.Duration
	Rate []int64
	// Late bounds the emulators' lateness during a load that counts (see
	// measureInTime).
	Late lateBound
	// CA is the web server's CA certificate (DER), for the contenders
	// that load over HTTPS (HTTP/3).
	CA []byte
	// ConnsPerHost is every contender's limit of connections per host
	// (0: a browser's, pageload.MaxConnsPerHost).
	ConnsPerHost int
	// SplitConns is path 1's connections in the split contender (0:
	// half the host's).
	SplitConns int
	// LeftOut names, by workload, the contenders not run (see leftOut).
	LeftOut map[string][]string
	// Traced: a path follows a trace, which each measured load starts
	// at its position (see runClient).
	Traced bool
	// Browser is where the browser contenders' Chromium runs.
	Browser browserSetup
	// KnowledgeDir is the client's folder for the restarted contenders'
	// knowledge (Config.Knowledge), made by the client.
	KnowledgeDir string `json:"-"`
}

// browserSetup is the isolated namespace the browser contenders run
// Chromium in (see testbed.Isolated), and the web servers' key.
type browserSetup struct {
	Netns         string
	Addr, Gateway netip.Addr
	SPKI          string // see browser.SPKI
}

// record is one measured page load.
type record struct {
	Scenario, Workload, Contender string
	Rep                           int
	PLT                           time.Duration
	Bytes                         int64
	Paths                         map[string]int // objects per path
	// The server's retransmitted segments and retransmission timeouts
	// during the load: a timeout (200 ms at least) can weigh more than
	// anything a contender decides on a fast page.
	Retransmits, Timeouts int64
	// Responses an intents contender moved to another path, and parts
	// of responses it split off to another (see intents.Mover,
	// intents.Splitter).
	Moved, Split int64
	// Failed is the error that ended the load, if one did (its PLT is
	// then how long it ran).
	Failed string `json:",omitempty"`
	// Estimates are an intents contender's estimates of the paths during
	// a load of a traced scenario, every estimateEvery.
	Estimates []estimateSample `json:",omitempty"`
	// Response bodies an intents contender resumed by range on another
	// connection when theirs stalled mid-body (or its path went down):
	// their server's timeouts then go uncounted above, as the server's
	// socket closes before it times out.
	Resumed int64
	// Load tags a browser's load: the web servers' log of its requests
	// gives its bytes and paths (see browserLoads).
	Load string `json:",omitempty"`
	// The emulators' lateness during the load, over every link
	// direction: the latest packet, and the mean.
	LateMax, LateMean time.Duration
	// Redone is how many tries of this load were dropped because the
	// emulators ran late during them (see measureInTime); KeptLate, that
	// even the last try did and was kept.
	Redone   int
	KeptLate bool `json:",omitempty"`
}

func main() {
	if os.Getenv(childEnv) != "" {
		client()
		return
	}
	if os.Getenv(failoverEnv) != "" {
		failoverClient()
		return
	}
	scenSpec := flag.String("scenario", "symmetric,asymmetric", "comma-separated: symmetric, asymmetric, grid, paper, papergrid, traces, or cells of two paths, each RATE/RTT or RTT/trace:NAME (as 6M/20ms+5M/50ms or 10M/20ms+50ms/trace:Verizon-LTE-short)")
	workSpec := flag.String("workload", "32x100KB", "comma-separated: NxSIZE (objects after a 10 KB root), mixed1, mixed2, or FILE.har")
	hosts := flag.Int("hosts", 1, "servers the handcrafted pages' objects are spread over")
	reps := flag.Int("reps", 5, "measured loads per contender and cell (medians are reported)")
	contenders := flag.String("contenders", strings.Join(defaultContenders, ","), "comma-separated, of: "+strings.Join(contenderKeys(), ", "))
	sample := flag.Int("sample", 0, "run only this many scenarios, picked at random (with -seed)")
	seed := flag.Uint64("seed", 1, "seed for -sample")
	out := flag.String("out", "pageload-results", "folder for the CSV files and plots")
	queue := flag.Float64("queue", 0, "drop-tail queue of each link, in bandwidth-delay products of its path (deeper: fewer losses when six connections slow-start at once); 0: 1, and 4 for grid, paper, papergrid and traces")
	prune := flag.Bool("prune", false, "leave out a single path where by arithmetic (the page's bytes at its rate, and its round trips) it takes over 3 × the other path's time (default: on for papergrid only)")
	failoverMode := flag.Bool("failover", false, "instead of page loads, cut path 1 in the middle of a download (link event, blackhole) for each failover mechanism, and measure how soon path 2 carries it on")
	failoverPath1 := flag.String("failover-path1", "", "with -failover: path 1 as RATE/RTT or RTT/trace:NAME (default 20M/20ms); a trace starts each mechanism's transfer r at the same position")
	cuts := flag.Int("cuts", 10, "with -failover: cuts of each kind per mechanism")
	mechanisms := flag.String("mechanisms", strings.Join(failoverMechanisms, ","), "with -failover: comma-separated, of: "+strings.Join(failoverMechanisms, ", "))
	split := flag.Int("split", 0, "path 1's connections in the split contender, path 2 the rest of -conns (0: half)")
	conns := flag.Int("conns", pageload.MaxConnsPerHost, "connections per host for every contender (a browser's 6; fewer shows what a path carries with a part of them)")
	traces := flag.String("traces", defaultTraces, "folder of the traces that cells' RTT/trace:NAME paths name")
	withBrowser := flag.Bool("browser", false, "load the pages in headless Chromium too, through the proxy over plain HTTP and HTTPS (contenders "+strings.Join(browserContenders, ",")+" unless -contenders says)")
	parallel := flag.Int("parallel", 1, "cells run at once, each on a testbed of its own (lowered while the emulators cannot keep time: see -late-max)")
	lateMax := flag.Duration("late-max", defaultLateBound.Max, "a load during which an emulated link delivered a packet later than this after its due time (or 0.5 % of the load's time, if more) is loaded again")
	lateMean := flag.Duration("late-mean", defaultLateBound.Mean, "a load during which the emulated links delivered their packets later than this on average is loaded again")
	reportDir := flag.String("report", "", "instead of loading pages, print the tables of the run in this -out folder again, from its loads.csv, and draw its plots again")
	agreeDirs := flag.String("agree", "", "instead of loading pages, compare runs: their -out folders, comma-separated, references (two serial runs, say) first and the run to judge last")
	trace := flag.String("trace", "", "log this contender's loads to stderr (each object's start, end and path, and what each path carried against its rate) and, for an intents contender, every decision and the paths' estimates")
	flag.Parse()
	if *reportDir != "" {
		recs, err := readRun(*reportDir)
		if err != nil {
			log.Fatal(err)
		}
		res, err := runResults(recs, *traces)
		if err != nil {
			log.Fatal(err)
		}
		res.printTables(os.Stdout)
		res.printGoal(os.Stdout)
		res.printBrowser(os.Stdout)
		res.printPaper(os.Stdout, 10)
		res.printPaperSummary(os.Stdout)
		if err := res.plot(*reportDir); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *agreeDirs != "" {
		if err := agree(os.Stdout, strings.Split(*agreeDirs, ","), *traces); err != nil {
			log.Fatal(err)
		}
		return
	}
	if slices.Contains([]string{"papergrid", "papergrid2", "gridcheck"}, *scenSpec) {
		// The paper grid's own pages, contenders and loads, unless told.
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["workload"] {
			*workSpec = papergridPages
		}
		if !set["contenders"] {
			*contenders = strings.Join(papergridContenders, ",")
		}
		if !set["reps"] {
			*reps = papergridReps
		}
	}

	if *withBrowser {
		set := false
		flag.Visit(func(f *flag.Flag) { set = set || f.Name == "contenders" })
		if !set {
			*contenders = strings.Join(browserContenders, ",")
		}
		if _, err := exec.LookPath("chromium"); err != nil {
			log.Fatal("-browser needs chromium (apt-get install chromium)")
		}
	}
	if *failoverMode {
		if os.Geteuid() != 0 {
			log.Fatal("pageload builds network namespaces: run it as root (sudo)")
		}
		mechs := strings.Split(*mechanisms, ",")
		for _, m := range mechs {
			if !slices.Contains(failoverMechanisms, m) {
				log.Fatalf("unknown mechanism %q (have %s)", m, strings.Join(failoverMechanisms, ", "))
			}
		}
		if *cuts < 1 {
			log.Fatal("-cuts must be at least 1")
		}
		if *failoverPath1 != "" {
			p1, err := parsePath(*failoverPath1, *traces)
			if err != nil {
				log.Fatal(err)
			}
			failoverPaths[0] = p1
		}
		results, err := failover(mechs, *cuts, max(3, *cuts/3))
		if err != nil {
			log.Fatal(err)
		}
		sums := summarize(results, mechs)
		printFailover(os.Stdout, sums, *cuts)
		if err := writeFailover(*out, results, sums); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("\nCSV and plots in %s/\n", *out)
		return
	}
	scens, err := parseScenarios(*scenSpec, *traces)
	if err != nil {
		log.Fatal(err)
	}
	if *queue < 0 {
		log.Fatal("-queue must be positive (or 0: each scenario's own)")
	}
	if *queue > 0 {
		for i := range scens {
			scens[i] = scens[i].withQueue(*queue)
		}
	}
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "prune" {
			for i := range scens {
				scens[i].Prune = *prune
			}
		}
	})
	if *sample > 0 && *sample < len(scens) {
		r := rand.New(rand.NewPCG(*seed, 0))
		r.Shuffle(len(scens), func(i, j int) { scens[i], scens[j] = scens[j], scens[i] })
		scens = scens[:*sample]
	}
	var workloads []pageload.Workload
	for _, w := range strings.Split(*workSpec, ",") {
		wl, err := pageload.Parse(w, *hosts)
		if err != nil {
			log.Fatal(err)
		}
		workloads = append(workloads, wl)
	}
	keys := strings.Split(*contenders, ",")
	for _, k := range keys {
		if _, ok := contenderNames[k]; !ok {
			log.Fatalf("unknown contender %q (have %s)", k, strings.Join(contenderKeys(), ", "))
		}
	}
	if *reps < 1 {
		log.Fatal("-reps must be at least 1")
	}
	if *parallel < 1 {
		log.Fatal("-parallel must be at least 1")
	}
	if *lateMax <= 0 || *lateMean <= 0 {
		log.Fatal("-late-max and -late-mean must be positive")
	}
	if *conns < 1 || *conns > pageload.MaxConns {
		log.Fatalf("-conns must be from 1 to %d (the limit over all hosts)", pageload.MaxConns)
	}
	if *split < 0 || *split >= *conns {
		log.Fatalf("-split must be from 1 to %d (-conns less one), or 0 for half", *conns-1)
	}
	if *conns < 2 && slices.Contains(keys, "split") {
		log.Fatal("the split contender needs -conns 2 or more: a connection on each path")
	}
	if os.Geteuid() != 0 {
		log.Fatal("pageload builds network namespaces: run it as root (sudo)")
	}
	run := &run{workloads: workloads, contenders: keys, reps: *reps, trace: *trace, conns: *conns, split: *split,
		parallel: *parallel, late: lateBound{Max: *lateMax, Mean: *lateMean}}
	records, err := run.all(scens)
	if err != nil {
		log.Fatal(err)
	}
	res := newResults(scens, workloads, keys, records)
	res.connsPerHost = *conns
	res.hosts = *hosts
	res.lowered = run.lowered
	res.printTables(os.Stdout)
	res.printGoal(os.Stdout)
	res.printBrowser(os.Stdout)
	res.printPaper(os.Stdout, 10)
	res.printPaperSummary(os.Stdout)
	printEstimates(os.Stdout, scens, records, keys)
	printMarks(os.Stdout, scens, records, keys)
	if err := res.write(*out); err != nil {
		log.Fatal(err)
	}
	if slices.ContainsFunc(scens, scenario.traced) {
		if err := writeEstimates(*out, scens, records, keys, workloads[0].Name); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("\nCSV and plots in %s/\n", *out)
}

type run struct {
	workloads  []pageload.Workload
	contenders []string
	reps       int
	trace      string
	conns      int // connections per host (0: a browser's)
	split      int // path 1's connections in the split contender (0: half)
	// parallel is how many cells may run at once, each on a testbed of
	// its own (at most; lowered when the emulators cannot keep time).
	parallel int
	late     lateBound
	// lowered says what the run said when it moved its parallelism.
	lowered []string
}

// all runs every scenario on a testbed of its own, up to r.parallel at
// once, and returns their records in the scenarios' order.
func (r *run) all(scens []scenario) ([]record, error) {
	loads := func(sc scenario) int {
		n := 0
		for _, w := range r.workloads {
			n += (len(r.contenders) - len(leftOut(sc, w, r.contenders))) * r.reps
		}
		return n
	}
	bar := &progressBar{}
	for _, sc := range scens {
		bar.total += loads(sc)
	}
	defer bar.clear()
	par := newParallelism(r.parallel)
	recs := make([][]record, len(scens))
	errs := make([]error, len(scens))
	var wg sync.WaitGroup
	for i, sc := range scens {
		par.acquire()
		bar.clear()
		fmt.Fprintf(os.Stderr, "pageload: scenario %d of %d: %s\n", i+1, len(scens), sc.Name)
		bar.cell(sc.Name, true)
		wg.Go(func() {
			defer par.release()
			defer bar.cell(sc.Name, false)
			recs[i], errs[i] = r.scenario(sc, func(rec record) {
				bar.load()
				if msg := par.count(rec.Redone); msg != "" {
					bar.clear()
					fmt.Fprintf(os.Stderr, "pageload: %s\n", msg)
				}
			})
		})
	}
	wg.Wait()
	r.lowered = par.changed
	var records []record
	for i, sc := range scens {
		if errs[i] != nil {
			return nil, fmt.Errorf("scenario %s: %w", sc.Name, errs[i])
		}
		records = append(records, recs[i]...)
	}
	return records, nil
}

// scenario runs sc on a testbed of its own, calling loaded with each
// record as its load ends.
func (r *run) scenario(sc scenario, loaded func(record)) ([]record, error) {
	servers := 1
	for _, w := range r.workloads {
		servers = max(servers, w.Hosts())
	}
	tb, err := testbed.Start(testbed.Spec{Paths: sc.Paths, Servers: servers, MPTCP: &testbed.MPTCPSpec{}})
	if err != nil {
		return nil, err
	}
	defer tb.Close()
	web, err := tb.StartWeb(testbed.WebOptions{HTTP3: true}) // MPTCP-capable, TCP for the rest; HTTP/3 on UDP
	if err != nil {
		return nil, err
	}
	cfg := config{Scenario: sc.Name, Workloads: r.workloads, Contenders: r.contenders, Reps: r.reps,
		Trace: r.trace, ServerNetns: tb.Server.Name, ConnsPerHost: r.conns, SplitConns: r.split, Late: cmp.Or(r.late, defaultLateBound),
		CA: web.CA.Cert.Certificate[len(web.CA.Cert.Certificate)-1], LeftOut: map[string][]string{}}
	for _, w := range r.workloads {
		if out := leftOut(sc, w, r.contenders); len(out) > 0 {
			cfg.LeftOut[w.Name] = out
		}
	}
	for _, p := range sc.Paths {
		cfg.RTT = append(cfg.RTT, p.RTT())
		cfg.Rate = append(cfg.Rate, p.Down.MeanRate())
	}
	cfg.Traced = sc.traced()
	if slices.ContainsFunc(r.contenders, isBrowser) {
		web.HandlePath(pageload.SitePrefix, &pageload.Site{Pages: r.workloads, Host: serverHost})
		iso, err := tb.AddIsolated()
		if err != nil {
			return nil, err
		}
		spki, err := spkiHash(web.CA.Cert.Certificate[0])
		if err != nil {
			return nil, err
		}
		cfg.Browser = browserSetup{Netns: iso.Name, Addr: iso.Addr, Gateway: iso.Gateway, SPKI: spki}
	}
	startLoad := func(rep int) {
		if cfg.Traced {
			startTraces(tb, sc, rep)
		}
	}
	recs, err := runClient(tb, cfg, startLoad, loaded)
	browserLoads(recs, web.Requests())
	var carried strings.Builder
	for _, p := range tb.Paths {
		up, down := p.Up.Stats(), p.Down.Stats()
		fmt.Fprintf(&carried, "pageload: %s: path %d carried %d packets down, dropped %d at its queue; %d up, dropped %d\n",
			sc.Name, p.Index, down.Packets, down.Drops, up.Packets, up.Drops)
	}
	os.Stderr.WriteString(carried.String())
	return recs, err
}

// traceStride is how far apart in their traces successive loads start:
// load r of every contender starts at r × traceStride, so that contenders
// meet the same network and a cell's loads sample its traces rather than
// one moment of them.
const traceStride = 10 * time.Second

// startTraces sets the traced links of tb, whose scenario is sc, to the
// trace position of load rep, from now.
func startTraces(tb *testbed.Testbed, sc scenario, rep int) {
	at := time.Duration(rep) * traceStride
	for i, p := range tb.Paths {
		for _, l := range []struct {
			d    *testbed.Direction
			spec testbed.LinkParams
		}{{p.Up, sc.Paths[i].Up}, {p.Down, sc.Paths[i].Down}} {
			if l.spec.Trace != nil {
				l.spec.TraceStart += at
				l.d.Set(l.spec)
			}
		}
	}
}

// runClient runs this program again inside the client namespace and
// collects its records, calling loaded with each as it arrives. The
// client asks, before and after each measured load, for the load's span
// of the emulators (see serveEmulator): startLoad sets the traces to the
// load's position, and the span's lateness goes back to the client.
func runClient(tb *testbed.Testbed, cfg config, startLoad func(rep int), loaded func(record)) ([]record, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	arg, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("ip", "netns", "exec", tb.Client.Name, self)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stdin = bytes.NewReader(arg) // a HAR workload may be larger than an environment variable may
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	asks, asked, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	answered, answers, err := os.Pipe()
	if err != nil {
		asks.Close()
		asked.Close()
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{asked, answered}
	served := make(chan error, 1)
	go func() {
		defer asks.Close()
		defer answers.Close() // a child still asking then reads EOF
		served <- serveEmulator(asks, answers, startLoad, tb.TakeLateness)
	}()
	err = cmd.Start()
	// The child has its own copies of its ends: ours close, so that its
	// exit (or a failed start) ends the loop above.
	for _, f := range cmd.ExtraFiles {
		f.Close()
	}
	if err != nil {
		asks.Close() // the loop may not have started reading
		<-served
		return nil, fmt.Errorf("client: %w", err)
	}
	var records []record
	dec := json.NewDecoder(stdout)
	var decodeErr error
	for dec.More() {
		var r record
		if decodeErr = dec.Decode(&r); decodeErr != nil {
			io.Copy(io.Discard, stdout) // let the child end
			break
		}
		records = append(records, r)
		loaded(r)
	}
	err = cmd.Wait()
	serveErr := <-served
	switch {
	case err != nil:
		return nil, fmt.Errorf("client: %w", err)
	case decodeErr != nil:
		return nil, fmt.Errorf("client's records: %w", decodeErr)
	case serveErr != nil:
		return nil, fmt.Errorf("client's emulator asks: %w", serveErr)
	}
	return records, nil
}
