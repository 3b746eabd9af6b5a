package testbed

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// LinkParams shape one direction of an emulated link.
type LinkParams struct {
	// Delay is the one-way propagation delay.
	Delay time.Duration
	// Rate is the bottleneck rate in bits of IP packets per second; 0 is
	// unlimited.
	Rate int64
	// Trace, if set, replaces Rate: the bottleneck releases queued packets
	// at the trace's delivery opportunities (see Trace), from position
	// TraceStart at the moment the parameters are Set.
	Trace      *Trace
	TraceStart time.Duration
	// Queue is the drop-tail queue limit in bytes in front of the
	// bottleneck; 0 means one bandwidth-delay product of the path (at least
	// MinQueue).
	Queue int
	// Loss is the probability of dropping a packet at random, 0 to 1.
	Loss float64
	// Down drops every packet, as a link that lost its carrier.
	Down bool
	// DropUDP drops every UDP packet, as a network whose middlebox blocks
	// UDP (and so QUIC).
	DropUDP bool
}

// MeanRate is the direction's rate in bits per second: Rate, or its
// trace's mean.
func (p LinkParams) MeanRate() int64 {
	if p.Trace != nil {
		return p.Trace.MeanRate()
	}
	return p.Rate
}

// MinQueue is the smallest default queue: a few packets' worth, so a path
// with a tiny bandwidth-delay product still takes a burst.
const MinQueue = 16 << 10

// LinkStats count what a direction of a link did.
type LinkStats struct {
	Packets   int64         // delivered
	Bytes     int64         // delivered, IP packet bytes
	Drops     int64         // dropped at the full queue
	Losses    int64         // dropped at random (Loss) or because the link was down
	MaxLate   time.Duration // latest delivery after its due time
	TotalLate time.Duration // sum of lateness over delivered packets
}

// MeanLate is the mean lateness of a delivered packet.
func (s LinkStats) MeanLate() time.Duration {
	if s.Packets == 0 {
		return 0
	}
	return s.TotalLate / time.Duration(s.Packets)
}

// Direction emulates one direction of a link: it reads IP packets from one
// TUN device, holds each for the serialisation time at the bottleneck rate
// plus the one-way delay, dropping at a full queue, and writes it to the
// other TUN device.
//
// The emulator runs in this process's goroutines rather than a helper
// process: parameters change and counters read with no IPC, and the TUN
// file descriptors stay valid whichever namespace the devices are in. Each
// direction's delivery goroutine sleeps with clock_nanosleep on its own
// locked OS thread at a real-time priority (see realtime), which wakes
// within tens of microseconds where time.Sleep is ~0.6 ms late.
type Direction struct {
	params atomic.Pointer[setting]
	bdp    int // default queue, from the path's RTT and this rate

	in, out *os.File
	queue   chan packet
	rng     *rand.Rand

	mu        sync.Mutex // guards stats, span and onBytes
	stats     LinkStats
	span      Lateness // since the last TakeLateness
	onBytes   []bytesHook
	busyUntil int64 // ns on CLOCK_MONOTONIC; reader goroutine only

	// A traced direction's state, the reader goroutine's only: the
	// setting the cursor follows, the queued packets' departures (in
	// order) and their bytes.
	traced   *setting
	cursor   traceCursor
	departed []departure
	backlog  int

	wg sync.WaitGroup
}

// setting is a direction's parameters and when they were set: a trace's
// position TraceStart is at epoch.
type setting struct {
	LinkParams
	epoch int64 // ns on CLOCK_MONOTONIC
}

// departure is when a queued packet of a traced direction leaves the
// bottleneck.
type departure struct {
	at int64 // ns on CLOCK_MONOTONIC
	n  int
}

// bytesHook is a function to call once a direction has delivered at bytes.
type bytesHook struct {
	at int64
	f  func()
}

// OnBytes calls f once, in a goroutine of its own, when the direction has
// delivered n bytes in all (Stats().Bytes), counted from its start: a test
// can act in the middle of a transfer without polling.
func (d *Direction) OnBytes(n int64, f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stats.Bytes >= n {
		go f()
		return
	}
	d.onBytes = append(d.onBytes, bytesHook{n, f})
}

type packet struct {
	buf []byte
	n   int
	due int64 // ns on CLOCK_MONOTONIC
}

const packetBufSize = 2048 // TUN MTU is 1500 and TUN does no GSO here

var bufPool = sync.Pool{New: func() any { b := make([]byte, packetBufSize); return &b }}

// Params returns the direction's current parameters.
func (d *Direction) Params() LinkParams { return d.params.Load().LinkParams }

// Set changes the parameters; packets already scheduled keep their times.
// A trace starts anew at TraceStart, now, with an empty queue ahead of the
// next packet.
func (d *Direction) Set(p LinkParams) { d.params.Store(&setting{p, monotonic()}) }

// change sets the parameters f changes, a trace going on where it is.
func (d *Direction) change(f func(*LinkParams)) {
	s := *d.params.Load()
	f(&s.LinkParams)
	d.params.Store(&s)
}

// Lateness is how late an emulator delivered packets after their due
// times over a span: a measurement taken while the emulator could not keep
// time (a busy machine) measured the machine, not the network.
type Lateness struct {
	Packets int64         // delivered in the span
	Max     time.Duration // the latest delivery after its due time
	Total   time.Duration // summed over the span's packets
}

// Mean is the mean lateness of a delivered packet.
func (l Lateness) Mean() time.Duration {
	if l.Packets == 0 {
		return 0
	}
	return l.Total / time.Duration(l.Packets)
}

// Add merges another span's lateness into l (several directions, or
// several spans).
func (l Lateness) Add(o Lateness) Lateness {
	return Lateness{Packets: l.Packets + o.Packets, Max: max(l.Max, o.Max), Total: l.Total + o.Total}
}

// TakeLateness returns the direction's lateness since the last call (or
// its start) and starts a new span: a page loader takes it before and
// after each load, and so knows whether the links kept time during it.
func (d *Direction) TakeLateness() Lateness {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.span
	d.span = Lateness{}
	return l
}

// Stats returns a snapshot of the counters.
func (d *Direction) Stats() LinkStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func (d *Direction) queueLimit(p *setting) int {
	if p.Queue > 0 {
		return p.Queue
	}
	return max(d.bdp, MinQueue)
}

// start runs the direction until in is closed.
func (d *Direction) start(seed uint64) {
	d.queue = make(chan packet, 16384)
	d.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	d.wg.Add(2)
	go d.read()
	go d.deliver()
}

func (d *Direction) read() {
	defer d.wg.Done()
	defer close(d.queue)
	for {
		bp := bufPool.Get().(*[]byte)
		n, err := d.in.Read(*bp)
		if err != nil {
			bufPool.Put(bp)
			return
		}
		if due, ok := d.admit((*bp)[:n]); ok {
			select {
			case d.queue <- packet{buf: *bp, n: n, due: due}:
				continue
			default: // the delay line is full: count it as a queue drop
				d.mu.Lock()
				d.stats.Drops++
				d.mu.Unlock()
			}
		}
		bufPool.Put(bp)
	}
}

// admit decides the fate of an IP packet arriving now: its due time, or
// false when it is dropped.
func (d *Direction) admit(pkt []byte) (int64, bool) {
	n := len(pkt)
	p := d.params.Load()
	now := monotonic()
	if p.Down || (p.DropUDP && isUDP(pkt)) || (p.Loss > 0 && d.rng.Float64() < p.Loss) {
		d.mu.Lock()
		d.stats.Losses++
		d.mu.Unlock()
		return 0, false
	}
	if p.Trace != nil {
		return d.admitTraced(p, n, now)
	}
	if p.Rate <= 0 {
		return now + p.Delay.Nanoseconds(), true
	}
	start := max(now, d.busyUntil)
	backlog := float64(start-now) * float64(p.Rate) / 8e9 // bytes waiting ahead of this one
	if int(backlog)+n > d.queueLimit(p) {
		d.mu.Lock()
		d.stats.Drops++
		d.mu.Unlock()
		return 0, false
	}
	d.busyUntil = start + int64(float64(n)*8e9/float64(p.Rate))
	return d.busyUntil + p.Delay.Nanoseconds(), true
}

// admitTraced schedules an n-byte packet arriving now at a traced
// direction: it leaves with the opportunity that carries its last byte,
// behind the packets queued before it, unless they already hold the queue's
// limit.
func (d *Direction) admitTraced(p *setting, n int, now int64) (int64, bool) {
	if q := d.traced; q == nil || q.Trace != p.Trace || q.TraceStart != p.TraceStart || q.epoch != p.epoch {
		d.cursor = traceCursor{t: p.Trace}
		d.cursor.seek(p.TraceStart.Milliseconds())
		d.departed, d.backlog = d.departed[:0], 0
	}
	d.traced = p
	for len(d.departed) > 0 && d.departed[0].at <= now {
		d.backlog -= d.departed[0].n
		d.departed = d.departed[1:]
	}
	if d.backlog+n > d.queueLimit(p) {
		d.mu.Lock()
		d.stats.Drops++
		d.mu.Unlock()
		return 0, false
	}
	// The trace's position now, rounded up to its next millisecond: an
	// opportunity earlier in this millisecond has passed.
	pos := p.TraceStart.Nanoseconds() + now - p.epoch
	ms := (pos + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	leave := p.epoch + d.cursor.send(n, ms)*int64(time.Millisecond) - p.TraceStart.Nanoseconds()
	d.departed = append(d.departed, departure{leave, n})
	d.backlog += n
	return leave + p.Delay.Nanoseconds(), true
}

// isUDP reports whether an IP packet carries UDP (directly after the
// IPv6 header: no extension headers are looked through).
func isUDP(pkt []byte) bool {
	switch {
	case len(pkt) >= 20 && pkt[0]>>4 == 4:
		return pkt[9] == unix.IPPROTO_UDP
	case len(pkt) >= 40 && pkt[0]>>4 == 6:
		return pkt[6] == unix.IPPROTO_UDP
	}
	return false
}

func (d *Direction) deliver() {
	defer d.wg.Done()
	// The thread is never unlocked, so it ends with this goroutine: it
	// may run at a real-time priority, which no other goroutine must
	// inherit.
	runtime.LockOSThread()
	realtime()
	for pkt := range d.queue {
		ts := unix.NsecToTimespec(pkt.due)
		for {
			err := unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		late := time.Duration(max(monotonic()-pkt.due, 0))
		_, err := d.out.Write(pkt.buf[:pkt.n])
		buf := pkt.buf
		bufPool.Put(&buf)
		if err != nil {
			continue // the peer device is gone while shutting down
		}
		d.mu.Lock()
		d.stats.Packets++
		d.stats.Bytes += int64(pkt.n)
		d.stats.TotalLate += late
		d.stats.MaxLate = max(d.stats.MaxLate, late)
		d.span = d.span.Add(Lateness{Packets: 1, Max: late, Total: late})
		for i := 0; i < len(d.onBytes); i++ {
			if h := d.onBytes[i]; d.stats.Bytes >= h.at {
				go h.f()
				d.onBytes = append(d.onBytes[:i], d.onBytes[i+1:]...)
				i--
			}
		}
		d.mu.Unlock()
	}
}

// realtime puts the calling thread in the lowest real-time class
// (SCHED_FIFO, priority 1), if the process may (root), else leaves it as
// it is. A deliverer woken at a packet's due time then runs at once
// instead of waiting a few milliseconds behind the ordinary threads of
// the clients and servers beside it: with six testbeds at once on two
// cores, one try of a load in five had a packet over 5 ms late as an
// ordinary thread, though the cores were mostly idle; at a real-time
// priority a load's latest packet is 0.2–0.35 ms late at the median
// (1.0–1.3 ms before), serial or four testbeds at once, and the mean
// lateness fell from 90 µs to 34 µs (BENCHMARKS.md, "Parallel
// testbeds"). It sleeps between packets, and the kernel's real-time
// throttling bounds it regardless.
func realtime() {
	// Reset on fork: a thread it starts (the runtime starts none from a
	// locked thread, but to be sure) is an ordinary one.
	_ = unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: 1, Flags: unix.SCHED_FLAG_RESET_ON_FORK}, 0)
}

// openTUN makes a TUN device named name inside n (IFF_TUN|IFF_NO_PI: raw IP
// packets) and returns its file, which joins the runtime poller so Close
// unblocks a pending Read.
func openTUN(n *Netns, name string) (*os.File, error) {
	var f *os.File
	err := n.Do(func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF %s: %w", name, err)
		}
		f = os.NewFile(uintptr(fd), "tun:"+name)
		return nil
	})
	return f, err
}
