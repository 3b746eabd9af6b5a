package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

func newGet(ctx context.Context, url string) (*http.Request, error) {
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		return nil, fmt.Errorf("URL %q: want http:// or https://", url)
	}
	return http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
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
