// Package h3conn is what the Transport's pool needs of an HTTP/3
// connection: the interface package h3 implements over quic-go. It is
// internal, so that it can change with the pool's needs.
package h3conn

import (
	"context"
	"net"
	"net/http"
	"time"
)

// Conn is one HTTP/3 connection, as an intents.HTTP3Dialer opens it. The
// Transport's pool counts its requests (a stream each, until the response
// body is read or closed) and offers it to the policy as a candidate with
// free streams, as an HTTP/2 connection.
type Conn interface {
	// RoundTrip sends a request on a new stream of the connection, as
	// http.RoundTripper; many may run at once. An error after which the
	// server cannot have processed the request wraps intents.ErrUnprocessed.
	RoundTrip(*http.Request) (*http.Response, error)
	// Err is nil while the connection can take new requests, and after
	// that (closed, timed out, a GOAWAY received) why not.
	Err() error
	// Close closes the connection and its socket.
	Close() error
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
	// Stats are the connection's counters: its RTT feeds its path's
	// estimates, as TCP_INFO does for TCP connections, and its bytes tell
	// whether its path still carries anything.
	Stats() Stats
	// Probe sends a packet the server acknowledges at once (RFC 9114
	// section 6.2.3's reserved stream type, which a server ignores), so
	// that a round trip later Stats shows whether the path answered.
	Probe() error
	// AddPath readies a move of the connection to pc, a UDP socket on
	// another path (QUIC connection migration, RFC 9000 section 9): it
	// probes the path and returns once the server answered, with the path
	// ready to switch to. The connection owns pc from then on, also when
	// the probe fails.
	AddPath(ctx context.Context, pc net.PacketConn) (Path, error)
}

// Stats are a Conn's counters, as its QUIC stack keeps them.
type Stats struct {
	SmoothedRTT time.Duration // 0 before the first sample
	// BytesSent and BytesReceived count QUIC packets' bytes (UDP
	// payloads), retransmissions included.
	BytesSent, BytesReceived uint64
}

// Path is a path a Conn probed (see Conn.AddPath).
type Path interface {
	// Switch moves the connection to the path, with its streams in
	// flight: what was in flight on the old path is sent again here.
	Switch() error
	// Close abandons the path.
	Close() error
}
