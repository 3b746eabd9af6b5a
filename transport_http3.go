package intents

import (
	"context"
	"net"
	"time"
)

// http3Port says whether a request to o may go over HTTP/3, and to which
// UDP port.
func (t *Transport) http3Port(o origin, proxied bool, ch Choice, now time.Time) (uint16, bool) {
	if t.HTTP3 == nil || o.scheme != "https" || proxied || t.dial != nil || ch.MPTCP {
		return 0, false
	}
	return t.altSvc.lookup(o.key, pathName(ch.Path), o.port, t.HTTP3Always, now)
}

// dialHTTP3 opens an HTTP/3 connection to o on ch's path.
func (t *Transport) dialHTTP3(ctx context.Context, ch Choice, o origin, port uint16, opened Intents) (*h3Conn, error) {
	pc, remote, err := t.dialer.packetConnFor(ctx, t.core.m, o.host, port, ch)
	if err != nil {
		return nil, err
	}
	cfg := t.tlsH3.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = o.host
	}
	c, err := t.HTTP3.DialHTTP3(ctx, pc, remote, cfg)
	if err != nil {
		return nil, err
	}
	return &h3Conn{c: c, dialer: t.dialer, remote: remote, opened: opened}, nil
}

// raceHTTP3 opens a connection to o for a request: HTTP/3 on ch's path,
// and TCP (tcp) beside it if HTTP/3 has not connected within the race
// delay, or at once if it failed. The first to connect wins; the other is
// closed. An origin whose HTTP/3 failed or lost is marked broken.
func (t *Transport) raceHTTP3(ctx context.Context, ch Choice, o origin, port uint16, opened Intents,
	tcp func(context.Context, Choice) (pooled, net.Conn, error)) (pooled, net.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &h3Race{results: make(chan h3RaceResult, 2), running: 1}
	go func() {
		c, err := t.dialHTTP3(ctx, ch, o, port, opened)
		if err != nil {
			r.results <- h3RaceResult{err: err, quic: true}
			return
		}
		r.results <- h3RaceResult{c: c, raw: quicConnView{c.c}, quic: true}
	}()
	startTCP := func() {
		r.tcpStarted = true
		r.running++
		go func() {
			c, raw, err := tcp(ctx, ch)
			r.results <- h3RaceResult{c: c, raw: raw, err: err}
		}()
	}
	delay := t.HTTP3RaceDelay
	if delay == 0 {
		delay = defaultHTTP3RaceDelay
	}
	var timer <-chan time.Time
	if delay > 0 {
		tm := time.NewTimer(delay)
		defer tm.Stop()
		timer = tm.C
	}
	for r.running > 0 {
		select {
		case <-timer:
			timer = nil
			if !r.tcpStarted && r.winner == nil {
				startTCP()
			}
		case res := <-r.results:
			r.running--
			if r.receive(res, cancel) && res.quic {
				t.altSvc.markBroken(o.key, pathName(ch.Path), time.Now())
				if !r.tcpStarted && delay > 0 && ctx.Err() == nil {
					startTCP()
				}
			}
		}
	}
	return r.outcome(func(working bool) {
		if working {
			t.altSvc.markWorking(o.key, pathName(ch.Path))
		} else {
			t.altSvc.markBroken(o.key, pathName(ch.Path), time.Now())
		}
	})
}
