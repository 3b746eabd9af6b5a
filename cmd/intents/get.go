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

// progress draws a bar on a terminal: one segment per path, in the
// proportion of the bytes each carried.
type progress struct {
	w     io.Writer
	total int64
	last  time.Time
	on    bool
}

func newProgress(w io.Writer, total int64) *progress {
	return &progress{w: w, total: total, on: isTerminal(w)}
}

// segment letters, by path in name order.
const marks = "#=*+%@"

// due reports whether a draw now would show anything: the bar is on and
// was last drawn 100 ms ago or more.
func (p *progress) due() bool { return p.on && time.Since(p.last) >= 100*time.Millisecond }

func (p *progress) draw(n int64, per map[string]int64) {
	if !p.due() {
		return
	}
	p.last = time.Now()
	const width = 40
	names := make([]string, 0, len(per))
	for name := range per {
		names = append(names, name)
	}
	slices.Sort(names)
	var bar, legend strings.Builder
	drawn := 0
	for i, name := range names {
		cells := 0
		if p.total > 0 {
			// Ranges fetched again at the tail may add up past the total.
			cells = min(int(per[name]*width/p.total), width-drawn)
		}
		drawn += cells
		bar.WriteString(strings.Repeat(string(marks[i%len(marks)]), cells))
		fmt.Fprintf(&legend, " %c %s %.1f MB", marks[i%len(marks)], orOS(name), float64(per[name])/1e6)
	}
	pad := max(0, width-bar.Len())
	frac := ""
	if p.total > 0 {
		frac = fmt.Sprintf("%3.0f %%", 100*float64(n)/float64(p.total))
	}
	fmt.Fprintf(p.w, "\r\033[K[%s%s] %s%s", bar.String(), strings.Repeat(".", pad), frac, legend.String())
}

func (p *progress) done() {
	if p.on {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
