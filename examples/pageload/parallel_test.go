//go:build linux

package main

import (
	"bufio"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/testbed"
)

// A load during which the emulators ran later than the bound is dropped
// and loaded again; the one that kept time is kept, with the count of
// those dropped; after maxRedos drops the last try is kept as it is.
func TestLateLoadsAreLoadedAgain(t *testing.T) {
	b := lateBound{Max: 5 * time.Millisecond, Mean: 500 * time.Microsecond}
	onTime := testbed.Lateness{Packets: 100, Max: time.Millisecond, Total: 10 * time.Millisecond}
	stalled := testbed.Lateness{Packets: 100, Max: 20 * time.Millisecond, Total: 30 * time.Millisecond} // one stall
	slow := testbed.Lateness{Packets: 100, Max: 2 * time.Millisecond, Total: 100 * time.Millisecond}    // late throughout
	second := time.Second
	assert.False(t, b.exceeded(onTime, second))
	assert.True(t, b.exceeded(stalled, second), "the latest packet over the bound")
	assert.True(t, b.exceeded(slow, second), "the mean over the bound")
	assert.False(t, b.exceeded(testbed.Lateness{}, second), "no packets, nothing late")
	assert.False(t, b.exceeded(stalled, 10*time.Second), "a 20 ms stall in a 10 s load: 0.2 % of its time")
	assert.True(t, b.exceeded(stalled, 3*time.Second), "in a 3 s load: 0.7 %")
	assert.True(t, b.exceeded(slow, 10*time.Second), "the mean bound does not grow")

	run := func(spans ...testbed.Lateness) (tries []int, kept testbed.Lateness, redone int) {
		next := 0
		kept, redone = measureInTime(func(n int) time.Duration { tries = append(tries, n); return second }, func() testbed.Lateness {
			l := spans[min(next, len(spans)-1)]
			next++
			return l
		}, b)
		return tries, kept, redone
	}
	tries, kept, redone := run(onTime)
	assert.Equal(t, []int{0}, tries)
	assert.Equal(t, onTime, kept)
	assert.Zero(t, redone)

	tries, kept, redone = run(stalled, slow, onTime)
	assert.Equal(t, []int{0, 1, 2}, tries, "each late try is loaded again")
	assert.Equal(t, onTime, kept)
	assert.Equal(t, 2, redone)

	tries, kept, redone = run(stalled)
	assert.Len(t, tries, maxRedos+1, "a bounded number of tries")
	assert.Equal(t, stalled, kept, "the last one is kept, late")
	assert.Equal(t, maxRedos, redone)
}

// The client's asks and the parent's answers: a load's span starts after
// its traces are set and what ran before it is discarded; its end brings
// the span's lateness back.
func TestEmulatorLink(t *testing.T) {
	asksR, asksW := io.Pipe()
	answersR, answersW := io.Pipe()
	var started []int
	spans := []testbed.Lateness{
		{Packets: 7, Max: time.Second}, // before the load: discarded
		{Packets: 42, Max: 3 * time.Millisecond, Total: 21 * time.Millisecond},
	}
	served := make(chan error, 1)
	go func() {
		defer answersW.Close()
		served <- serveEmulator(asksR, answersW, func(rep int) { started = append(started, rep) }, func() testbed.Lateness {
			l := spans[0]
			spans = spans[1:]
			return l
		})
	}()
	link := emulatorLink{asks: asksW, answers: bufio.NewReader(answersR)}
	link.start(3)
	assert.Equal(t, []int{3}, started, "the traces set before the load starts")
	l := link.end()
	assert.Equal(t, int64(42), l.Packets)
	assert.Equal(t, 3*time.Millisecond, l.Max)
	assert.Equal(t, 500*time.Microsecond, l.Mean())
	asksW.Close()
	require.NoError(t, <-served)

	// A garbled ask ends the conversation with an error, not a guess.
	asksR, asksW = io.Pipe()
	go func() {
		io.WriteString(asksW, "start -1\n")
		asksW.Close()
	}()
	assert.Error(t, serveEmulator(asksR, io.Discard, func(int) {}, func() testbed.Lateness { return testbed.Lateness{} }))
}

// Parallelism falls by one after a window of loads with more than
// lowerAt of their tries dropped, never below one, and rises by one after
// a clean window, never above what was asked for; a few drops move
// nothing.
func TestParallelismMoves(t *testing.T) {
	p := newParallelism(3)
	window := func(redone ...int) (said []string) {
		for i := range parallelWindow {
			r := 0
			if i < len(redone) {
				r = redone[i]
			}
			if msg := p.count(r); msg != "" {
				said = append(said, msg)
			}
		}
		return said
	}
	assert.Empty(t, window(1, 1, 1), "3 of 103 tries: a busy spell, not the machine")
	assert.Equal(t, 3, p.limit)
	said := window(2, 2, 2)
	assert.Equal(t, 2, p.limit, "6 of 106 tries")
	require.Len(t, said, 1)
	assert.Contains(t, said[0], "lowered to 2")
	window(3, 3)
	assert.Equal(t, 1, p.limit)
	window(3, 3)
	assert.Equal(t, 1, p.limit, "never below one")
	said = window()
	assert.Equal(t, 2, p.limit, "a clean window: one more")
	assert.Contains(t, said[0], "raised to 2")
	window()
	window()
	assert.Equal(t, 3, p.limit, "never above what was asked for")
	window(1)
	assert.Equal(t, 3, p.limit, "1 of 101: neither way")
	assert.Len(t, p.changed, 4, "two down, two up")
}
