package proxy

import (
	"io"
	"sync"
	"sync/atomic"
)

// relayBufferSize is a tunnel's copy buffer where it cannot splice, and a
// forwarded body's.
const relayBufferSize = 64 << 10

// relayBuffers lend the tunnels their copy buffers; relayBuffersOut counts
// those lent (the bound on their memory: see relayCopy), relayPipesOut
// the pipes lent where tunnels splice (Linux), at most two a tunnel, and
// relaySpliced the bytes spliced.
var (
	relayBuffers    = sync.Pool{New: func() any { b := make([]byte, relayBufferSize); return &b }}
	relayBuffersOut atomic.Int64
	relayPipesOut   atomic.Int64
	relaySpliced    atomic.Int64
)

func getRelayBuffer() *[]byte {
	relayBuffersOut.Add(1)
	return relayBuffers.Get().(*[]byte)
}

func putRelayBuffer(b *[]byte) {
	relayBuffers.Put(b)
	relayBuffersOut.Add(-1)
}

// copyHolding is io.Copy through a lent buffer held for the whole copy:
// for a source that is no socket.
func copyHolding(dst io.Writer, src io.Reader) (int64, error) {
	buf := getRelayBuffer()
	defer putRelayBuffer(buf)
	// Hidden behind plain interfaces, neither side takes over the copy
	// with a buffer of its own.
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *buf)
}

// relayBufferPool lends the relay buffers to the forwarded bodies' copies
// (httputil.BufferPool): each response's copy holds one only while it
// runs.
type relayBufferPool struct{}

func (relayBufferPool) Get() []byte {
	relayBuffersOut.Add(1)
	return *relayBuffers.Get().(*[]byte)
}

func (relayBufferPool) Put(b []byte) {
	relayBuffers.Put(&b)
	relayBuffersOut.Add(-1)
}
