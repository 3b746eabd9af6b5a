package intents

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/sockintents/intents/internal/estimate"
	"github.com/sockintents/intents/internal/tcpinfo"
)

// Dead paths without a link event: a path whose link stays up but carries
// nothing (a blackhole: a Wi-Fi without uplink, a middlebox dropping the
// flow) is noticed from the HTTP connections on it. One that has requests
// in flight and has received nothing, not even an acknowledgment, for
// quietProbeAfter (at least two of its smoothed RTTs) may only have a
// slow server: a TCP handshake through the same path to the same peer
// tells, while a spare connection is opened on the next path the request
// could use. If the handshake gets no answer either (within two RTTs, at
// least probeAnswer), the connection is still quiet quietDeadAfter (at
// least three RTTs) into its silence, and
// neither another of the pool's connections on the path nor its interface
// received anything meanwhile, the path is taken to be silent: it is
// marked Unresponsive until a handshake through it succeeds again (new
// requests go elsewhere), and its quiet connections are handled as on a
// path that went down (core.loseLocked): those that lose nothing by it
// close (idle, or their one request sent again on another path or
// resumed there by range); one whose request would fail (a body that
// cannot resume, a request that may not be sent twice) stays with it, as
// it would in net/http: a cellular link stalls for tens of seconds and
// comes back (see docs/findings.md), with its queued packets and the
// probe's answer behind them, and nothing tells a stall from a blackhole
// until it ends. It ends as its server, the kernel or the caller's
// deadline ends it, never cut by the library. If the probe
// is answered while the connection stays quiet, the path works and the
// connection waits out a retransmission timeout: a response body on it
// that resumes by range asks for its rest on another connection
// (resumeStalled). HTTP/3 connections watch their own progress
// (h3Conn.stalled) and move instead.
// It takes TCP_INFO: Linux only; elsewhere a blackhole ends a transfer
// only when TCP itself gives up.
const (
	quietProbeAfter = 100 * time.Millisecond
	quietDeadAfter  = 200 * time.Millisecond
	// probeAnswer is the least time a probe is given to be answered (two
	// RTTs of the path at least).
	probeAnswer = 50 * time.Millisecond
	// reprobeFirst and reprobeMax space the probes of a path marked
	// Unresponsive: doubling, so a path that stays dead costs a trickle.
	reprobeFirst = time.Second
	reprobeMax   = 30 * time.Second
	// reprobeTimeout bounds one of them: a handshake slower than this on a
	// path thought dead does not make it worth using yet.
	reprobeTimeout = 2 * time.Second
)

// quietFor is how long the connection has received nothing, as far as
// its path is concerned: zero while bytes wait unread (the reader is
// behind, not the path).
func quietFor(info tcpinfo.Info, activeFor time.Duration) time.Duration {
	if info.Unread > 0 {
		return 0
	}
	return min(info.LastDataRecv, info.LastAckRecv, activeFor)
}

func probeAfter(rtt time.Duration) time.Duration { return max(2*rtt, quietProbeAfter) }
func deadAfter(rtt time.Duration) time.Duration  { return max(3*rtt, quietDeadAfter) }

// checkQuiet is the sampler's look at an active TCP connection, busy
// since activeSince: it sends a liveness probe when the connection has
// been quiet long enough (see probeDue). It returns when the connection's
// silence, if it goes on, calls for the next look (0: nothing sooner than
// the next tick).
func (h *pathHealth) checkQuiet(e *entry, info tcpinfo.Info, activeSince time.Time) time.Duration {
	if e.c.carrier() != carrierTCP || e.path == nil || h.m == nil || e.mptcp {
		// Lent out whole (Pool): no telling whether data is owed. MPTCP:
		// the kernel moves it to its other subflows.
		return 0
	}
	quiet := quietFor(info, time.Since(activeSince))
	if !responsive(e.path) {
		// On a path taken for silent, busy when it was (bytes waited
		// unread then): now quiet too, it is handled as the others were.
		if quiet >= deadAfter(info.RTT) {
			h.pool.closeDown([]*entry{e})
		}
		return 0
	}
	e.probe.mu.Lock()
	defer e.probe.mu.Unlock()
	if !e.probe.answeredSince.Equal(activeSince) {
		e.probe.answered = 0 // busy again since: a new request, a new bar
	}
	if e.probe.probing {
		return 0 // the probe decides
	}
	if next := probeDue(quiet, info.RTT, e.probe.answered); next > 0 {
		return next
	}
	remote, ok := remoteAddrPort(e.raw)
	if !ok {
		return 0
	}
	// Long enough for the connection to be quiet for deadAfter by the
	// time the probe gives up, and for two round trips of the probe.
	wait := max(2*info.RTT, probeAnswer, deadAfter(info.RTT)-quiet)
	e.probe.probing = h.run(func() { h.probeQuiet(e, remote, activeSince, info.RTT, quiet, wait) })
	if e.probe.probing {
		h.warmSpare(e)
	}
	return 0
}

// probeDue is how much longer a connection quiet for quiet, whose path has
// round-trip time rtt, is to stay quiet before a probe; 0: now. A silence
// is probed from probeAfter; once a probe was answered while the
// connection was busy with the same requests (a server that thinks, a
// stream that idles by design, as a long poll or server-sent events), the
// next only when a silence lasts four times as long: such a connection is
// probed a few times, not at every pause.
func probeDue(quiet, rtt, answered time.Duration) time.Duration {
	if bar := max(probeAfter(rtt), 4*answered); quiet < bar {
		return bar - quiet
	}
	return 0
}

// probeQuiet runs one liveness probe for e, quiet for quiet, and takes
// its path for dead if nothing answered: not the probe, not e, no other
// connection of the pool on the path, and the interface received (next
// to) nothing meanwhile. A probe lost in a congested queue, while e waits
// out a retransmission timeout, is not enough: the congestion shows as
// traffic received.
func (h *pathHealth) probeQuiet(e *entry, remote netip.AddrPort, activeSince time.Time, rtt, quiet, wait time.Duration) {
	ctx, cancel := context.WithTimeout(h.ctx, wait)
	rx, rxOK := ifaceRxBytes(e.path.Name)
	err := h.probeLive(ctx, e.path, remote)
	cancel()
	if now, ok := ifaceRxBytes(e.path.Name); rxOK && ok && now-rx >= silentRxBytes {
		err = nil // the interface received: not a blackhole
	}
	info, ok := tcpInfoOf(e)
	e.probe.mu.Lock()
	e.probe.probing = false
	if answered(err) {
		e.probe.answered, e.probe.answeredSince = quiet, activeSince
	}
	e.probe.mu.Unlock()
	if log := h.m.debugLogger(context.Background()); log != nil {
		log.Debug("intents: quiet connection, path probed", "path", e.path.Name, "peer", remote, "quiet", quiet, "answered", answered(err))
	}
	if answered(err) && ok {
		h.resumeStalled(e, info, quiet)
	}
	if answered(err) || h.ctx.Err() != nil || !ok {
		return
	}
	active, activeFor := h.pool.busy(e)
	if !active || quietFor(info, activeFor) < deadAfter(rtt) {
		return
	}
	if quiet, heard := h.silentOn(e.path, probeAfter(rtt)); !heard {
		h.pathSilent(e.path, quiet, remote, err)
	}
}

// minRTO is the least a TCP sender waits for an acknowledgment beyond
// the connection's round trip before it sends again (Linux's
// TCP_RTO_MIN; RFC 6298 says a second).
const minRTO = 200 * time.Millisecond

// resumeStalled closes e if it carries one response body, mid-way, that
// resumes by range (entry.resumable: on HTTP/1) and stayed quiet while its path
// answered the probe (quiet for quiet when probed, info read after): its
// server is waiting out a retransmission timeout (a server that has sent
// the headers and part of a body of known length is rarely thinking). The
// body asks for the rest on a new connection or an idle one, where the
// policy says, rather than hold the page up while it waits out a
// retransmission timeout. Only
// while the timeout still ahead, minRTO and a round trip from the
// server's last transmission, would outlast a new connection's two round
// trips: on a slow path with a deep queue a connection is quiet for long
// behind the others' bytes, and closing it throws away its own, which
// still take the bottleneck's time (see docs/findings.md).
func (h *pathHealth) resumeStalled(e *entry, info tcpinfo.Info, quiet time.Duration) {
	_, activeFor := h.pool.busy(e)
	quietNow := quietFor(info, activeFor)
	if info.RTT+quietNow >= minRTO {
		return
	}
	if quietNow < quiet || !h.pool.closeStalled(e) {
		return
	}
	if log := h.m.debugLogger(context.Background()); log != nil {
		log.Debug("intents: stalled body resumes on another connection", "path", e.path.Name, "quiet", quietNow)
	}
}

// silentRxBytes is what an interface may receive while its path is taken
// for silent: a blackholed network still delivers a broadcast or two
// (ARP, router advertisements), a working one under load far more.
const silentRxBytes = 3000

// silentOn reads the TCP_INFO of the pool's TCP connections on p once
// (system calls: outside the pool's lock): heard if one of them received
// anything within the last window, else the ones to close if p is dead.
// One with bytes its reader has not taken yet is left alone.
func (h *pathHealth) silentOn(p *Path, window time.Duration) (quiet []*entry, heard bool) {
	for _, e := range h.pool.tcpOn(p) {
		info, ok := tcpInfoOf(e)
		switch {
		case ok && min(info.LastDataRecv, info.LastAckRecv) < window:
			return nil, true
		case !ok || info.Unread == 0:
			quiet = append(quiet, e)
		}
	}
	return quiet, false
}

// answered reports whether a probe's handshake got an answer: a
// connection, or a refusal (the peer's host answered).
func answered(err error) bool { return err == nil || errors.Is(err, syscall.ECONNREFUSED) }

// probeLive makes a TCP handshake with remote through p and closes the
// connection at once (a probe of p: see Dialer.probeRTT).
func (h *pathHealth) probeLive(ctx context.Context, p *Path, remote netip.AddrPort) error {
	return (&Dialer{}).probeRTT(ctx, h.m, p, Destination{Network: "tcp", Host: remote.Addr().String(), Port: remote.Port()})
}

// pathSilent takes p for dead: marks it Unresponsive, handles quiet (its
// TCP connections that are idle or quiet too) as on a path that went
// down, and probes it until it answers.
func (h *pathHealth) pathSilent(p *Path, quiet []*entry, remote netip.AddrPort, why error) {
	if p.est == nil {
		return
	}
	first := p.est.MarkUnresponsive()
	if first && !h.run(func() { h.reprobe(p.Name, p.est, remote) }) {
		p.est.ClearUnresponsive() // closing: nobody would probe it
	}
	stayed := h.pool.closeDown(quiet)
	if log := h.m.debugLogger(context.Background()); log != nil {
		log.Debug("intents: path unresponsive", "path", p.Name, "peer", remote, "closed", len(quiet)-stayed, "held", stayed, "probe", why)
	}
}

// recoverable reports whether closing e loses nothing: it carries no
// request, or one (on a connection that carries one at a time, or one
// stream) that is sent again on another path (idempotent, with a body
// that can be had again, before its response) or whose body resumes
// there by range.
func (e *entry) recoverable() bool {
	// Its requests, not the pool's reservations besides (one not sent yet
	// fails as unprocessed, and is sent again).
	switch e.c.requests() {
	case 0:
		return true
	case 1:
		return e.fate.replayable.Load() || e.fate.resumable.Load()
	}
	return false
}

// reprobe probes the path named name, marked Unresponsive, with doubling
// gaps until a handshake gets through (or something else clears the
// mark), the path goes down (the link's own event says when it is back),
// or the pool closes: a mark nobody probes any longer is cleared, so no
// path stays shunned on stale evidence. It probes the peer that went
// silent and the path's DNS servers (TCP port 53): a peer that went away
// does not keep a working path marked.
func (h *pathHealth) reprobe(name string, est *estimate.Path, remote netip.AddrPort) {
	wait := reprobeFirst
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			est.ClearUnresponsive()
			return
		case <-t.C:
		}
		if !est.Unresponsive() {
			return
		}
		p := h.m.Path(name)
		if p == nil || !p.Up {
			est.ClearUnresponsive()
			return
		}
		ctx, cancel := context.WithTimeout(h.ctx, reprobeTimeout)
		ok := h.pathAnswers(ctx, p, reprobeTargets(p, remote))
		cancel()
		if ok {
			est.ClearUnresponsive()
			if log := h.m.debugLogger(context.Background()); log != nil {
				log.Debug("intents: path answers again", "path", name)
			}
			return
		}
		wait = min(2*wait, reprobeMax)
		t.Reset(wait)
	}
}

// reprobeTargets are the peer and p's DNS servers reached through p (not
// a loopback one: that is no server on the path), at TCP port 53.
func reprobeTargets(p *Path, peer netip.AddrPort) []netip.AddrPort {
	targets := []netip.AddrPort{peer}
	for _, s := range p.DNS {
		if a := s.Addr().Unmap(); !a.IsLoopback() && !a.IsUnspecified() {
			t := netip.AddrPortFrom(a, 53)
			if !slices.Contains(targets, t) {
				targets = append(targets, t)
			}
		}
	}
	return targets
}

// pathAnswers makes a handshake with every target through p at once and
// reports whether one answered (see answered) before ctx ended.
func (h *pathHealth) pathAnswers(ctx context.Context, p *Path, targets []netip.AddrPort) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan bool, len(targets))
	for _, t := range targets {
		go func() { results <- answered(h.probeLive(ctx, p, t)) }()
	}
	ok := false
	for range targets {
		if <-results && !ok {
			ok = true
			cancel() // the others need not go on
		}
	}
	return ok
}

// remoteAddrPort is c's peer address.
func remoteAddrPort(c net.Conn) (netip.AddrPort, bool) {
	if c == nil {
		return netip.AddrPort{}, false
	}
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	return ap, err == nil
}
