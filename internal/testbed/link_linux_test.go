package testbed

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A traced direction's packets leave at the trace's opportunities, from
// the position it was set at, then take the one-way delay; its queue
// holds what has not left.
func TestTracedDirectionSchedules(t *testing.T) {
	tr := parse(t, "1", "1", "3", "4") // opportunities at 1, 1, 3, 4, 5, 5, 7, 8, ...
	d := &Direction{}
	d.Set(LinkParams{Trace: tr, TraceStart: 2 * time.Millisecond, Delay: 10 * time.Millisecond, Queue: 4500})
	p := d.params.Load()
	ms := int64(time.Millisecond)
	at := func(pos float64) int64 { return p.epoch + int64(pos*float64(ms)) } // trace position 2 + pos ms
	due := func(n int, now int64) int64 {
		t.Helper()
		due, ok := d.admitTraced(p, n, now)
		if !assert.True(t, ok) {
			return 0
		}
		return (due-p.epoch)/ms + 2 // the position it arrives at, past the delay
	}
	assert.Equal(t, int64(3+10), due(1500, at(0)), "from position 2: the opportunity at 3 ms")
	assert.Equal(t, int64(4+10), due(1500, at(0)))
	assert.Equal(t, int64(5+10), due(1500, at(0.1)), "queued behind two")
	_, ok := d.admitTraced(p, 1500, at(0.2))
	assert.False(t, ok, "the queue's 4500 bytes are full: three packets have not left")
	assert.Equal(t, int64(1), d.Stats().Drops)
	assert.Equal(t, int64(5+10), due(1500, at(1.5)), "one left at 3 ms: room again, 5 ms's second opportunity")
	assert.Equal(t, int64(9+10), due(40, at(6.5)), "the queue emptied; 7 and 8 ms passed at 8.5")

	d.Set(LinkParams{Trace: tr, Queue: 4500})
	p = d.params.Load()
	due2, ok := d.admitTraced(p, 1500, p.epoch)
	assert.True(t, ok, "set anew: an empty queue")
	assert.Equal(t, p.epoch+ms, due2, "from position 0: the opportunity at 1 ms, no delay")
	_, _ = d.admitTraced(p, 1500, p.epoch)

	d.change(func(l *LinkParams) { l.Loss = 0.5 })
	p = d.params.Load()
	due3, ok := d.admitTraced(p, 1500, p.epoch)
	assert.True(t, ok)
	assert.Equal(t, p.epoch+3*ms, due3, "another parameter changed: the trace and its queue go on")
}

// Each delivered packet's lateness counts in the span TakeLateness
// returns, and only there: a page loader reads a load's own lateness.
func TestTakeLateness(t *testing.T) {
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	d := &Direction{in: inR, out: outW}
	d.Set(LinkParams{Delay: time.Millisecond})
	d.start(1)
	defer func() {
		inW.Close()
		inR.Close()
		d.wg.Wait()
		outW.Close()
		outR.Close()
	}()
	buf := make([]byte, packetBufSize)
	var sent int64
	send := func() {
		t.Helper()
		sent += 100
		counted := make(chan struct{})
		d.OnBytes(sent, func() { close(counted) }) // called once the packet counts
		_, err := inW.Write(make([]byte, 100))
		require.NoError(t, err)
		n, err := outR.Read(buf)
		require.NoError(t, err)
		require.Equal(t, 100, n)
		<-counted
	}
	send()
	send()
	first := d.TakeLateness()
	assert.Equal(t, int64(2), first.Packets)
	assert.GreaterOrEqual(t, first.Total, first.Max)
	assert.Equal(t, first.Total/2, first.Mean())
	assert.Zero(t, d.TakeLateness().Packets, "a new span starts empty")
	send()
	assert.Equal(t, int64(1), d.TakeLateness().Packets)
	assert.Equal(t, int64(3), d.Stats().Packets, "the counters since the start go on")
}
