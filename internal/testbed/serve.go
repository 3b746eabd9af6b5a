package testbed

import (
	"errors"
	"net"
	"testing"
)

// Serve accepts connections on l until the test ends, calling handle on
// each in turn and closing it after; at the end it closes l and waits for
// the accept loop. An accept error other than the listener's closing fails
// the test.
func Serve(t testing.TB, l net.Listener, handle func(net.Conn)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					t.Errorf("accept: %v", err)
				}
				return
			}
			handle(c)
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
}
