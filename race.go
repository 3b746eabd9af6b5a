package intents

import (
	"context"
	"net"
	"time"
)

// defaultPathRaceDelay is how long a Dialer with RacePaths gives a path to
// connect before it dials the next one beside it, where the path's RTT is
// not known: Happy Eyeballs' connection attempt delay (RFC 8305).
const defaultPathRaceDelay = 250 * time.Millisecond

// minPathRaceDelay bounds a delay derived from a measured RTT from below:
// a SYN's first retransmission is a second away, a lost handshake packet
// is the least a race must ride out.
const minPathRaceDelay = 100 * time.Millisecond

// pathRaceDelay is how long to give p before racing the next path: the
// setting, else three of p's round trips (a handshake and its slack),
// capped at defaultPathRaceDelay.
func (d *Dialer) pathRaceDelay(p *Path) time.Duration {
	if d.PathRaceDelay > 0 {
		return d.PathRaceDelay
	}
	if p != nil {
		if e := p.Estimate(); e.Measured && e.RTT > 0 {
			return min(max(3*e.RTT, minPathRaceDelay), defaultPathRaceDelay)
		}
	}
	return defaultPathRaceDelay
}

// raceable reports whether the intents let a dial race onto p: not where
// they avoid it or it costs, unless a broken connection would hurt
// (ResilienceSensitive).
func raceable(in *Intents, p *Path) bool {
	if p == nil || in.Resilience == ResilienceSensitive {
		return true
	}
	l, _ := effectiveLevel(in, p)
	return l != LevelAvoid && !p.Expensive
}

// racePaths dials the plan's choices as a race (see Dialer.RacePaths):
// the first at once, the next when the one before has not connected
// within its race delay or has failed. The first connection made wins;
// the others are cancelled, or closed if they connect meanwhile. A path
// still connecting when another won gets the time it had taken as an RTT
// sample and a lost packet in its estimates: the next decision weighs it
// as slow, or lossy.
func (d *Dialer) racePaths(ctx context.Context, in *Intents, pl plan, dial func(context.Context, Choice) (net.Conn, error)) (net.Conn, []*PathError) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		c   net.Conn
		err error
		i   int
	}
	n := len(pl.choices)
	results := make(chan result, n)
	started := make([]time.Time, n)
	done := make([]bool, n)
	next, running := 0, 0
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	start := func() {
		i := next
		next++
		running++
		started[i] = time.Now()
		go func() {
			c, err := dial(ctx, pl.choices[i])
			results <- result{c, err, i}
		}()
		// The next path, if the intents let it race, when this one has
		// had its time.
		if next < n && raceable(in, pl.choices[next].Path) {
			timer.Reset(d.pathRaceDelay(pl.choices[i].Path))
		} else {
			timer.Stop()
		}
	}
	start()
	var winner net.Conn
	var errs []*PathError
	for running > 0 {
		select {
		case <-timer.C:
			if winner == nil && next < n {
				start()
			}
		case r := <-results:
			running--
			done[r.i] = true
			switch {
			case r.err == nil && winner == nil:
				winner = r.c
				now := time.Now()
				for i := range next {
					if p := pl.choices[i].Path; !done[i] && p != nil {
						p.sampleRTT(now.Sub(started[i]))
						if p.est != nil {
							p.est.AddLoss(1, 1)
						}
					}
				}
				cancel()
			case r.err == nil:
				r.c.Close() // connected after the winner
			case winner == nil:
				errs = append(errs, &PathError{Path: pathName(pl.choices[r.i].Path), Err: r.err})
				if next < n && ctx.Err() == nil {
					start() // failed: the next at once, as without racing
				}
			}
		}
	}
	return winner, errs
}
