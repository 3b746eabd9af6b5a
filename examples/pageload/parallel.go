//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sockintents/intents/internal/testbed"
)

// lateBound is how late the emulators may deliver packets during a load
// that counts: a load during which they ran later measured the machine
// (a busy spell, too many testbeds at once), not the network, and is
// loaded again.
type lateBound struct {
	// Max bounds the latest packet; a load's own bound grows with its
	// time (see maxFor).
	Max  time.Duration
	Mean time.Duration // the load's packets on average
}

// defaultLateBound: the emulators keep a path's RTT to about 0.5 ms when
// the machine is idle (see ../../internal/testbed), and a 5 ms stall is a
// quarter of the shortest RTT of the paper's levels.
var defaultLateBound = lateBound{Max: 5 * time.Millisecond, Mean: 500 * time.Microsecond}

// stallShare is the share of a load's time that one stall of the
// emulators may take: a stall delays the packets due during it by at
// most its length, and so the load by at most that. A load of 13 s on a
// 2 Mbit/s path has ten times the packets of a one-second load, and so
// ten times the chance of meeting a rare stall of 6-16 ms, which changes
// its time by a thousandth; held to 5 ms, one such load in ten was loaded
// again, and the run lowered its parallelism to one for nothing.
const stallShare = 0.005

// maxFor is the bound of the latest packet in a load of plt: Max, or
// stallShare of the load's time if that is more.
func (b lateBound) maxFor(plt time.Duration) time.Duration {
	return max(b.Max, time.Duration(stallShare*float64(plt)))
}

// exceeded reports whether l, of a load of plt, is beyond the bound.
func (b lateBound) exceeded(l testbed.Lateness, plt time.Duration) bool {
	return l.Max > b.maxFor(plt) || l.Mean() > b.Mean
}

// maxRedos is how many times a late load is loaded again before the last
// try is kept as it is (and counted as kept late): a machine that cannot
// keep time for four loads in a row should be told, not waited out.
const maxRedos = 3

// measureInTime runs try (numbered from 0), which returns how long its
// load took, and then reads the emulators' lateness during it with end,
// and tries again while the lateness exceeds b, up to maxRedos more
// times. It returns the last try's lateness and how many tries were
// dropped.
func measureInTime(try func(n int) time.Duration, end func() testbed.Lateness, b lateBound) (testbed.Lateness, int) {
	for n := 0; ; n++ {
		plt := try(n)
		l := end()
		if !b.exceeded(l, plt) || n == maxRedos {
			return l, n
		}
	}
}

// The client asks the parent, which runs the emulators, to start a load's
// span ("start REP": the traces set to the load's position, the lateness
// so far discarded) and to end it ("end": the span's lateness, as JSON),
// on a pair of pipes: its fd 3 to ask, its fd 4 for the answers.
const (
	askStart = "start"
	askEnd   = "end"
)

// emulatorLink is the client's end of those pipes.
type emulatorLink struct {
	asks    io.Writer
	answers *bufio.Reader
}

// start opens load rep's span, once the parent has set it up.
func (e emulatorLink) start(rep int) {
	if _, err := fmt.Fprintf(e.asks, "%s %d\n", askStart, rep); err != nil {
		log.Fatalf("asking the emulators to start a load: %v", err)
	}
	if _, err := e.answers.ReadString('\n'); err != nil {
		log.Fatalf("waiting for the emulators to start a load: %v", err)
	}
}

// end closes the span and returns the emulators' lateness over it.
func (e emulatorLink) end() testbed.Lateness {
	if _, err := fmt.Fprintln(e.asks, askEnd); err != nil {
		log.Fatalf("asking the emulators' lateness: %v", err)
	}
	line, err := e.answers.ReadBytes('\n')
	if err != nil {
		log.Fatalf("reading the emulators' lateness: %v", err)
	}
	var l testbed.Lateness
	if err := json.Unmarshal(line, &l); err != nil {
		log.Fatalf("reading the emulators' lateness: %v", err)
	}
	return l
}

// serveEmulator answers a client's asks, read from asks, on answers until
// asks ends: startLoad(rep) sets a load's traces; lateness takes the
// emulators' span.
func serveEmulator(asks io.Reader, answers io.Writer, startLoad func(rep int), lateness func() testbed.Lateness) error {
	sc := bufio.NewScanner(asks)
	for sc.Scan() {
		verb, arg, _ := strings.Cut(sc.Text(), " ")
		var answer []byte
		switch verb {
		case askStart:
			rep, err := strconv.Atoi(arg)
			if err != nil || rep < 0 {
				return fmt.Errorf("client asked %q", sc.Text())
			}
			startLoad(rep)
			lateness() // what ran before the load is not the load's
			answer = []byte("\n")
		case askEnd:
			b, err := json.Marshal(lateness())
			if err != nil {
				return err
			}
			answer = append(b, '\n')
		default:
			return fmt.Errorf("client asked %q", sc.Text())
		}
		if _, err := answers.Write(answer); err != nil {
			return err
		}
	}
	return sc.Err()
}

// A parallel run watches the share of tries dropped for late emulators
// over windows of parallelWindow loads: over lowerAt, a window lowers
// its parallelism by one (not below one); under raiseAt, a window raises
// it by one again (not above what was asked for). A few per cent is a
// busy spell of the machine (a compiler run beside it); more is the
// machine failing to run that many testbeds at once. A window long
// enough that a spell of a few seconds does not decide it, and the way
// back up, keep one spell from halving a run's speed for good.
const (
	lowerAt        = 0.05
	raiseAt        = 0.01
	parallelWindow = 100
)

// parallelism bounds how many cells run at once, and moves the bound as
// above.
type parallelism struct {
	mu      sync.Mutex
	cond    *sync.Cond
	asked   int
	limit   int
	running int
	// in the current window: loads kept, and tries dropped
	loads, redone int
	changed       []string // what it said when it moved, for the report
}

func newParallelism(n int) *parallelism {
	p := &parallelism{asked: max(n, 1), limit: max(n, 1)}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// acquire waits for a free slot.
func (p *parallelism) acquire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.running >= p.limit {
		p.cond.Wait()
	}
	p.running++
}

// release frees a slot.
func (p *parallelism) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running--
	p.cond.Broadcast()
}

// count notes a load kept after redone dropped tries and, at the end of
// a window, moves the limit as above. It returns what it said, if it
// moved it.
func (p *parallelism) count(redone int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loads++
	p.redone += redone
	if p.loads < parallelWindow {
		return ""
	}
	share := float64(p.redone) / float64(p.loads+p.redone)
	tries := p.loads + p.redone
	p.loads, p.redone = 0, 0
	var msg string
	switch {
	case share > lowerAt && p.limit > 1:
		p.limit--
		msg = fmt.Sprintf("%.0f %% of the last %d tries of loads ran on late emulators: parallelism lowered to %d", share*100, tries, p.limit)
	case share < raiseAt && p.limit < p.asked:
		p.limit++
		p.cond.Broadcast()
		msg = fmt.Sprintf("%.0f %% of the last %d tries of loads ran on late emulators: parallelism raised to %d", share*100, tries, p.limit)
	default:
		return ""
	}
	p.changed = append(p.changed, msg)
	return msg
}

// progressBar draws a run's progress on stderr, if it is a terminal:
// loads done of all, and the cells running.
type progressBar struct {
	mu          sync.Mutex
	done, total int
	running     []string
}

func (b *progressBar) cell(name string, running bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if running {
		b.running = append(b.running, name)
	} else {
		for i, n := range b.running {
			if n == name {
				b.running = append(b.running[:i], b.running[i+1:]...)
				break
			}
		}
	}
	b.drawLocked()
}

func (b *progressBar) load() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done++
	b.drawLocked()
}

// clear removes the bar, before a line of its own goes to stderr.
func (b *progressBar) clear() {
	b.mu.Lock()
	defer b.mu.Unlock()
	progress(0, 0, "")
}

func (b *progressBar) drawLocked() {
	progress(b.done, b.total, strings.Join(b.running, "  "))
}
