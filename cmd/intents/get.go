package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sockintents/intents"
)

func newGet(ctx context.Context, url string) (*http.Request, error) {
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		return nil, fmt.Errorf("URL %q: want http:// or https://", url)
	}
	return http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
}

// getSummary is what get reports: per path, the requests and body bytes.
type getSummary struct {
	URL     string              `json:"url"`
	Status  int                 `json:"status"`
	Bytes   int64               `json:"bytes"`
	Seconds float64             `json:"seconds"`
	Paths   map[string]pathUsed `json:"paths"`
}

type pathUsed struct {
	Requests int64 `json:"requests"`
	Bytes    int64 `json:"bytes"`
}

// getOptions are get's flags, parsed.
type getOptions struct {
	asJSON    bool
	out       string
	in        intents.Intents
	policy    func() intents.Policy
	aggregate bool
	twoStep   int
	knowledge string
	url       string
}

func parseGet(args []string) (getOptions, error) {
	fs := newFlags("get")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	out := fs.String("o", "", "write the body to FILE (default: stdout, unless -json)")
	text := fs.String("intents", "", "intents, e.g. category=bulk,prefer=wifi")
	pname := fs.String("policy", "eaf", "policy: "+policyNames())
	aggregate := fs.Bool("aggregate", false, "fetch in byte ranges over all permitted paths at once")
	twoStep := fs.Int("twostep", 0, "two-step download: first this many bytes, then the rest as a sized request")
	knowledge := knowledgeFlag(fs)
	if err := parse(fs, args); err != nil {
		return getOptions{}, err
	}
	if fs.NArg() != 1 {
		return getOptions{}, usageError{"get takes one URL"}
	}
	mk, ok := policies[*pname]
	if !ok {
		return getOptions{}, usageError{fmt.Sprintf("unknown policy %q (have %s)", *pname, policyNames())}
	}
	in, err := intents.ParseIntents(*text)
	if err != nil {
		return getOptions{}, usageError{err.Error()}
	}
	return getOptions{asJSON: *asJSON, out: *out, in: in, policy: mk, aggregate: *aggregate, twoStep: *twoStep,
		knowledge: *knowledge, url: fs.Arg(0)}, nil
}

func cmdGet(ctx context.Context, args []string, stdout, stderr io.Writer, mf managerFunc) error {
	o, err := parseGet(args)
	if err != nil {
		return err
	}
	req, err := newGet(intents.WithIntents(ctx, o.in), o.url)
	if err != nil {
		return usageError{err.Error()}
	}
	m, err := mf(intents.Config{Policy: o.policy(), NoWatch: true, Knowledge: o.knowledge})
	if err != nil {
		return err
	}
	defer m.Close()
	tr := &intents.Transport{Manager: m, TwoStep: o.twoStep}
	if o.aggregate {
		tr.Aggregate = &intents.Aggregate{}
	}
	defer tr.CloseIdleConnections()

	var dst io.Writer = stdout
	switch {
	case o.out != "":
		f, err := os.Create(o.out)
		if err != nil {
			return err
		}
		defer f.Close()
		dst = f
	case o.asJSON:
		dst = io.Discard
	}
	sum, err := download(req, tr, dst, stderr)
	if err != nil {
		return err
	}
	if f, ok := dst.(*os.File); ok && o.out != "" {
		if err := f.Close(); err != nil {
			return err
		}
	}
	if o.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(sum)
	}
	w := stderr
	if o.out != "" {
		w = stdout
	}
	printGetSummary(w, sum)
	if sum.Status >= 400 {
		return fmt.Errorf("server answered %d %s", sum.Status, http.StatusText(sum.Status))
	}
	return nil
}

// download fetches req through tr into dst, drawing its progress on
// progressTo, and sums up what each path carried.
func download(req *http.Request, tr *intents.Transport, dst, progressTo io.Writer) (getSummary, error) {
	start := time.Now()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return getSummary{}, err
	}
	defer resp.Body.Close()
	bar := newProgress(progressTo, resp.ContentLength)
	n, err := copyWithProgress(dst, resp.Body, func(total int64) {
		now := time.Now()
		if !bar.due(now) {
			return // the Transport's statistics take its pool's lock: not per write
		}
		// This Transport carries this download alone: its bytes per path
		// are the download's.
		per := map[string]int64{}
		for name, s := range tr.Stats() {
			if s.BytesReceived > 0 {
				per[name] = s.BytesReceived
			}
		}
		bar.draw(now, total, per)
	})
	bar.done()
	if err != nil {
		return getSummary{}, err
	}
	sum := getSummary{URL: req.URL.String(), Status: resp.StatusCode, Bytes: n, Seconds: time.Since(start).Seconds(), Paths: map[string]pathUsed{}}
	for name, s := range tr.Stats() {
		if s.Requests > 0 || s.BytesReceived > 0 {
			sum.Paths[orOS(name)] = pathUsed{Requests: s.Requests, Bytes: s.BytesReceived}
		}
	}
	return sum, nil
}

// printGetSummary writes sum as get's closing lines: the status, and per
// path the requests and bytes.
func printGetSummary(w io.Writer, sum getSummary) {
	fmt.Fprintf(w, "%s: %d %s, %d bytes in %.2f s\n", sum.URL, sum.Status, http.StatusText(sum.Status), sum.Bytes, sum.Seconds)
	for _, name := range slices.Sorted(maps.Keys(sum.Paths)) {
		u := sum.Paths[name]
		fmt.Fprintf(w, "  %-12s %3d requests  %12d bytes\n", name, u.Requests, u.Bytes)
	}
}

// copyWithProgress copies src to dst, calling report with the bytes so
// far after each write.
func copyWithProgress(dst io.Writer, src io.Reader, report func(int64)) (int64, error) {
	buf := make([]byte, 64<<10)
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
			report(n)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// progress draws a bar on a terminal as a body arrives: one segment per
// path, in the proportion of the bytes each carried, each path's rate,
// and the time left at their sum.
type progress struct {
	w     io.Writer
	total int64 // -1: unknown
	on    bool
	last  time.Time
	prev  map[string]int64   // each path's bytes at the last draw
	rates map[string]float64 // each path's bytes/s, smoothed over draws
}

func newProgress(w io.Writer, total int64) *progress {
	return &progress{w: w, total: total, on: isTerminal(w), last: time.Now(), prev: map[string]int64{}, rates: map[string]float64{}}
}

// segment letters, by path in name order.
const marks = "#=*+%@"

// drawEvery is how often the bar is drawn at most.
const drawEvery = 100 * time.Millisecond

// due reports whether a draw at now would show anything: the bar is on
// and was last drawn drawEvery ago or more.
func (p *progress) due(now time.Time) bool { return p.on && now.Sub(p.last) >= drawEvery }

// draw shows n bytes of the body in, per path the bytes each carried (a
// path's ranges fetched ahead of the reader too).
func (p *progress) draw(now time.Time, n int64, per map[string]int64) {
	if !p.due(now) {
		return
	}
	dt := now.Sub(p.last).Seconds()
	p.last = now
	const width = 40
	names := make([]string, 0, len(per))
	for name := range per {
		names = append(names, name)
	}
	slices.Sort(names)
	var bar, legend strings.Builder
	drawn := 0
	var rate float64
	for i, name := range names {
		// Half the last interval's rate, half the earlier ones': steady
		// enough to read, quick to follow a path that slows.
		r := float64(per[name]-p.prev[name]) / dt
		if old, ok := p.rates[name]; ok {
			r = (r + old) / 2
		}
		p.rates[name], p.prev[name] = r, per[name]
		rate += r
		cells := 0
		if p.total > 0 {
			// Ranges fetched again at the tail may add up past the total.
			cells = min(int(per[name]*width/p.total), width-drawn)
		}
		drawn += cells
		mark := marks[i%len(marks)]
		bar.WriteString(strings.Repeat(string(mark), cells))
		fmt.Fprintf(&legend, "  %c %s %.1f MB %.1f MB/s", mark, orOS(name), float64(per[name])/1e6, r/1e6)
	}
	pad := max(0, width-bar.Len())
	frac, eta := "", ""
	if p.total > 0 {
		frac = fmt.Sprintf("%3.0f %%", 100*float64(n)/float64(p.total))
		if left := p.total - n; left > 0 && rate > 0 {
			eta = "  ETA " + time.Duration(float64(left)/rate*float64(time.Second)).Round(time.Second).String()
		}
	}
	fmt.Fprintf(p.w, "\r\033[K[%s%s] %s%s%s", bar.String(), strings.Repeat(".", pad), frac, legend.String(), eta)
}

func (p *progress) done() {
	if p.on {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
