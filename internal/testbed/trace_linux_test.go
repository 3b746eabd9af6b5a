package testbed

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fetch asks the bulk server on path p for n bytes and calls onRead with
// each read's time and size as they arrive.
func fetch(t *testing.T, tb *Testbed, p *Path, n int64, onRead func(time.Time, int)) {
	t.Helper()
	c, err := tb.Client.DialContext(nil)(context.Background(), "tcp", net.JoinHostPort(p.ServerAddr.String(), "9000"))
	require.NoError(t, err)
	defer c.Close()
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(n))
	_, err = c.Write(hdr[:])
	require.NoError(t, err)
	buf := make([]byte, 64<<10)
	var got int64
	for got < n {
		k, err := c.Read(buf)
		if k > 0 {
			got += int64(k)
			onRead(time.Now(), k)
		}
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}
	require.Equal(t, n, got)
}

// A long transfer over a measured LTE trace gets the rate the trace
// offered while it ran: the link releases packets at the trace's
// opportunities and at no other time.
func TestTracedLinkRate(t *testing.T) {
	tr, err := ReadTrace(filepath.Join(sharedTraces, "Verizon-LTE-short.down"))
	if err != nil {
		t.Skipf("the project's traces are not beside this checkout (%v)", err)
	}
	const start, delay = 30 * time.Second, 20 * time.Millisecond
	down := LinkParams{Delay: delay, Trace: tr, TraceStart: start, Queue: 4 << 20} // deep: the queue never drains
	tb := New(t, Spec{Paths: []PathSpec{{Up: LinkParams{Delay: delay, Rate: 50e6}, Down: down}}})
	startBulk(t, tb)
	p := tb.Paths[0]

	// From 200 kB on (TCP's slow start has filled the queue) to the
	// transfer's end, three seconds of the trace at its mean.
	n := 200<<10 + tr.MeanRate()*3/8
	var (
		mu          sync.Mutex
		first, last time.Time
		from, to    int64
	)
	p.Down.Set(down) // the trace from start, now
	set := time.Now()
	p.Down.OnBytes(200<<10, func() {
		mu.Lock()
		defer mu.Unlock()
		first, from = time.Now(), p.Down.Stats().Bytes
	})
	fetch(t, tb, p, n, func(at time.Time, _ int) { last = at })
	mu.Lock()
	defer mu.Unlock()
	require.False(t, first.IsZero())
	to = p.Down.Stats().Bytes
	stats := p.Down.Stats()
	got := float64(to-from) * 8 / last.Sub(first).Seconds()
	// Bytes delivered at t left the bottleneck one delay before.
	pos := func(at time.Time) time.Duration { return start + at.Sub(set) - delay }
	offered := tr.Rate(pos(first), pos(last))
	t.Logf("trace %s from %v to %v: offered %.2f Mbit/s (mean %.2f), delivered %.2f Mbit/s; drops %d, late mean %v max %v",
		tr.Name, pos(first), pos(last), offered/1e6, float64(tr.MeanRate())/1e6, got/1e6, stats.Drops, stats.MeanLate(), stats.MaxLate)
	assert.Zero(t, stats.Drops, "the deep queue drops nothing")
	assert.InEpsilon(t, offered, got, 0.03, "the delivered rate is the trace's over the same time")
}

// Where the trace offers nothing, nothing is delivered, from the
// millisecond the trace stops to the one it resumes.
func TestTracedLinkGap(t *testing.T) {
	// 12 Mbit/s for 300 ms, then nothing until 600 ms.
	lines := make([]string, 0, 301)
	for ms := 1; ms <= 300; ms++ {
		lines = append(lines, strconv.Itoa(ms))
	}
	lines = append(lines, "600")
	tr, err := ParseTrace("gap", strings.NewReader(strings.Join(lines, "\n")))
	require.NoError(t, err)
	const delay = 5 * time.Millisecond
	down := LinkParams{Delay: delay, Trace: tr, Queue: 4 << 20}
	tb := New(t, Spec{Paths: []PathSpec{{Up: LinkParams{Delay: delay, Rate: 50e6}, Down: down}}})
	startBulk(t, tb)
	p := tb.Paths[0]

	var reads []time.Time
	p.Down.Set(down)
	set := time.Now()
	fetch(t, tb, p, 1<<20, func(at time.Time, _ int) { reads = append(reads, at) })
	// The first silence between reads of over 100 ms is the trace's
	// first gap (the transfer may outlast a period and meet the next).
	var gapFrom, gapTo time.Time
	for i := 1; i < len(reads); i++ {
		if reads[i].Sub(reads[i-1]) > 100*time.Millisecond {
			gapFrom, gapTo = reads[i-1], reads[i]
			break
		}
	}
	require.False(t, gapFrom.IsZero(), "no silence in delivery")
	stats := p.Down.Stats()
	from, to := gapFrom.Sub(set)-delay, gapTo.Sub(set)-delay // trace positions
	t.Logf("reads stopped at %v and resumed at %v of the trace (gap from 300 ms to 600 ms); the emulator's latest delivery %v late", from, to, stats.MaxLate)
	// The emulator delivers late at worst (a thread scheduled late), never
	// early: the bounds below allow its own worst lateness and a reader's
	// wake-up.
	slack := 3*time.Millisecond + stats.MaxLate
	assert.GreaterOrEqual(t, from, 299*time.Millisecond, "deliveries go on until the trace stops")
	assert.LessOrEqual(t, from, 300*time.Millisecond+slack, "and stop then")
	assert.GreaterOrEqual(t, to, 599*time.Millisecond, "nothing while the trace offers nothing")
	assert.LessOrEqual(t, to, 600*time.Millisecond+slack, "deliveries resume with the trace")
}
