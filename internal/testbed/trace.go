package testbed

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// TraceMTU is the bytes one delivery opportunity of a trace carries: one
// full-size packet, or several smaller ones (Mahimahi's mm-link lets
// packets share an opportunity, so that ACKs do not each take one).
const TraceMTU = 1500

// maxTraceLines bounds a trace file: a 16-minute drive at 100 Mbit/s.
const maxTraceLines = 8 << 20

// Trace is a link direction's delivery schedule in Mahimahi's format: one
// line per opportunity for TraceMTU bytes to leave the bottleneck queue,
// at a millisecond offset from the trace's start; a time repeated N times
// is N opportunities in that millisecond. The schedule repeats every
// Period, the last line's time, as mm-link's does; opportunities that find
// the queue empty are lost.
type Trace struct {
	// Name is the file's base name without its extension, for reports.
	Name string
	// Period is the schedule's length: the time of its last opportunity.
	Period time.Duration

	ms []int64 // opportunity times, ms from the start, ascending
}

// ReadTrace reads a trace file (see Trace).
func ReadTrace(file string) (*Trace, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	name := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	return ParseTrace(name, f)
}

// ParseTrace reads a trace in Mahimahi's format from r. It rejects what
// mm-link rejects (no opportunity at all, a schedule of zero length) and
// what it would misread: a line that is not a non-negative integer, and
// times that go back.
func ParseTrace(name string, r io.Reader) (*Trace, error) {
	t := &Trace{Name: name}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" {
			continue
		}
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ms < 0 || ms > int64(time.Duration(1<<62)/time.Millisecond) {
			return nil, fmt.Errorf("trace %s: line %d: %q is not a time in milliseconds", name, line, s)
		}
		if n := len(t.ms); n > 0 && ms < t.ms[n-1] {
			return nil, fmt.Errorf("trace %s: line %d: %d ms comes before the line above it (%d ms)", name, line, ms, t.ms[n-1])
		}
		if len(t.ms) == maxTraceLines {
			return nil, fmt.Errorf("trace %s: over %d opportunities", name, maxTraceLines)
		}
		t.ms = append(t.ms, ms)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace %s: %w", name, err)
	}
	if len(t.ms) == 0 {
		return nil, fmt.Errorf("trace %s: no delivery opportunities", name)
	}
	last := t.ms[len(t.ms)-1]
	if last == 0 {
		return nil, errors.New("trace " + name + ": its schedule lasts no time (the last line's time is 0)")
	}
	t.Period = time.Duration(last) * time.Millisecond
	return t, nil
}

// MeanRate is the trace's rate over its period, in bits per second.
func (t *Trace) MeanRate() int64 {
	return int64(float64(len(t.ms)) * TraceMTU * 8 / t.Period.Seconds())
}

// Rate is the rate the trace offers between from and to (positions in the
// trace, wrapping at Period), in bits per second.
func (t *Trace) Rate(from, to time.Duration) float64 {
	if to <= from {
		return 0
	}
	return float64(t.opportunities(to)-t.opportunities(from)) * TraceMTU * 8 / (to - from).Seconds()
}

// opportunities counts the opportunities before position at (wrapping).
func (t *Trace) opportunities(at time.Duration) int64 {
	cycles, rest := t.cycleOf(at.Milliseconds())
	before, _ := slices.BinarySearch(t.ms, rest)
	return cycles*int64(len(t.ms)) + int64(before)
}

// cycleOf splits position ms into the schedule's repetitions before it and
// the rest, in (0, Period] past the first: the opportunities at a multiple
// of Period are the previous repetition's last ones.
func (t *Trace) cycleOf(ms int64) (cycles, rest int64) {
	period := t.Period.Milliseconds()
	cycles, rest = ms/period, ms%period
	if rest == 0 && cycles > 0 {
		cycles, rest = cycles-1, period
	}
	return cycles, rest
}

// traceCursor walks a trace's opportunities for one direction: which one
// is next to carry bytes and how many of its bytes are left.
type traceCursor struct {
	t     *Trace
	cycle int64 // the schedule's repetitions before this one
	i     int   // the opportunity's index in t.ms
	left  int   // bytes the opportunity has not carried
}

// at is the cursor's opportunity's position in the trace, in ms.
func (c *traceCursor) at() int64 { return c.cycle*c.t.Period.Milliseconds() + c.t.ms[c.i] }

// seek moves the cursor to the first opportunity at or after position ms,
// whole.
func (c *traceCursor) seek(ms int64) {
	var rest int64
	c.cycle, rest = c.t.cycleOf(ms)
	c.i, _ = slices.BinarySearch(c.t.ms, rest)
	if c.i == len(c.t.ms) {
		c.cycle++
		c.i = 0
	}
	c.left = TraceMTU
}

// next moves the cursor to the following opportunity, whole.
func (c *traceCursor) next() {
	c.i++
	if c.i == len(c.t.ms) {
		c.cycle++
		c.i = 0
	}
	c.left = TraceMTU
}

// send schedules n bytes arriving at position ms (the queue ahead of them
// already scheduled): they leave with the opportunity that carries their
// last byte, whose position it returns. Bytes left of an opportunity
// before ms are lost, as the queue was empty then.
func (c *traceCursor) send(n int, ms int64) int64 {
	if c.at() < ms {
		c.seek(ms)
	}
	for {
		if c.left >= n {
			c.left -= n
			return c.at()
		}
		n -= c.left
		c.next()
	}
}
