package intents

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/sockintents/intents/internal/estimate"
)

// A handshake tells a path's RTT, not its rate: on networks nothing is
// known of, the path that answers first may be the one that carries a
// page's first object at a fraction of the other's rate, and the page's
// burst waits for that object. A first request is therefore sent on two
// paths at once while no permitted path has shown anything of its
// capacity (see Transport.DisableFirstRace), and the first to bring its
// body wins. At most one such race on a Manager's paths: what it shows
// (the winner's rate, the loser's lag) is what the decisions after it
// weigh, and a Knowledge file makes the next Manager start from it, and
// from the race having run.

// raceBodyBytes is how much of a raced response's body is read before the
// race is decided: the first response whose body is complete, or has
// brought this much, wins. A page's root is mostly within it; a larger
// body has shown which path brings it faster by then. Bounds the memory a
// race holds: two such buffers.
const raceBodyBytes = 64 << 10

// raceKey carries into roundTripWith the path an entrant of a race is
// sent on (its request's placement only: the rest of a winner's body may
// move as any other's), and whether its body is held where it is: until
// the race is decided, and for ever for the loser, which is cancelled (a
// move would only send its request again).
type raceKey struct{}

type raceEntry struct {
	path *Path
	held atomic.Bool
}

// raceBodyWait bounds how long a race waits for a body once the first
// response's headers are in: a server may send a body of known length
// slowly, or stop midway, and a RoundTrip returns with the headers, not
// once the body is in. Then the entrant that has
// brought more of its body wins, and its caller reads on from there.
const raceBodyWait = time.Second

// entrant is one side of a race: its response and the start of its body,
// or its error.
type entrant struct {
	raceEntry
	cancel context.CancelFunc
	// Set before headers is closed: the response, or the error that
	// ended the request before one came.
	resp *http.Response
	err  error
	// Set before done is closed: the start of the body, and the error
	// that ended it early (the body is closed then).
	head    []byte
	headErr error
	headers chan struct{}
	done    chan struct{}
	read    atomic.Int64 // bytes of head so far, for a decision before done
	stop    atomic.Bool  // readHead returns after the Read under way
}

// failed reports whether e ended without a response to give: only once
// done is closed.
func (e *entrant) failed() bool { return e.err != nil || e.headErr != nil }

// startWait starts the wait for a body at the first headers of a race.
func startWait(wait <-chan time.Time) <-chan time.Time {
	if wait != nil {
		return wait
	}
	return time.After(raceBodyWait)
}

// lostRace gives the loser of a race the bound its loss shows (see
// estimate.Path.AddCeiling), if it lost on its rate: bytes (the body that
// won, or as much of it as decided the race) did not come over it within
// elapsed less its round trips (set-up, request, slow start's rounds),
// and the winner, its own round trips taken off, brought them at more
// than twice that rate. A loser whose round trips alone explain its loss
// showed nothing.
func lostRace(loser, winner *Path, bytes int64, elapsed time.Duration, tls bool) {
	rl, rw := loser.Estimate().RTT, winner.Estimate().RTT
	if bytes <= 0 || rl <= 0 || rw <= 0 {
		return
	}
	trips := 2 + math.Ceil(math.Log2(float64(bytes)/estimate.InitialWindow+1)) - 1 // handshake, request, slow start
	if tls {
		trips++
	}
	dl := elapsed - time.Duration(trips*float64(rl))
	dw := elapsed - time.Duration(trips*float64(rw))
	if dl <= 0 || (dw > 0 && dl <= 2*dw) {
		return
	}
	loser.sampleCeiling(bytes, dl)
}

// readHead reads the start of e's body: all of it, up to raceBodyBytes,
// unless its length is unknown (it may stream without end), or until the
// race stops it.
func (e *entrant) readHead() {
	body := e.resp.Body
	if body == nil || body == http.NoBody || e.resp.ContentLength <= 0 {
		return
	}
	// One byte beyond the length, to read its EOF; the length is the
	// server's (up to 2^63-1), bounded before it is added to.
	e.head = make([]byte, 0, min(e.resp.ContentLength, raceBodyBytes-1)+1)
	for len(e.head) < cap(e.head) && !e.stop.Load() {
		n, err := body.Read(e.head[len(e.head):cap(e.head)])
		e.head = e.head[:len(e.head)+n]
		e.read.Store(int64(len(e.head)))
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			body.Close()
			e.headErr = err
			return
		}
	}
}

// cause is why e failed.
func (e *entrant) cause() error {
	if e.err != nil {
		return e.err
	}
	return e.headErr
}

// discard ends an entrant that lost, once done: its request cancelled,
// its body closed.
func (e *entrant) discard() {
	e.cancel()
	if e.resp != nil && e.resp.Body != nil {
		e.resp.Body.Close()
	}
}

// racedBody is the winner's body: the start the race read, then the rest.
// A winner decided at raceBodyWait may still have a Read under way in
// readHead: the caller's first Read waits for it.
type racedBody struct {
	e     *entrant
	ready bool
	head  []byte
	rest  io.ReadCloser
}

func (b *racedBody) Read(p []byte) (int, error) {
	if !b.ready {
		<-b.e.done
		b.ready, b.head = true, b.e.head
	}
	if len(b.head) > 0 {
		n := copy(p, b.head)
		b.head = b.head[n:]
		return n, nil
	}
	if b.e.headErr != nil {
		return 0, b.e.headErr
	}
	return b.rest.Read(p)
}

// Close closes the rest, which ends a Read readHead may have under way.
func (b *racedBody) Close() error {
	err := b.rest.Close()
	<-b.e.done
	b.e.cancel()
	return err
}

// untraced hides the caller's httptrace.ClientTrace from the second
// entrant's request.
type untraced struct{ context.Context }

func (c untraced) Value(key any) any {
	v := c.Context.Value(key)
	if _, ok := v.(*httptrace.ClientTrace); ok {
		return nil
	}
	return v
}
