package testbed

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"

	"github.com/miekg/dns"
)

// listenTCP listens on TCP addr inside the server namespace.
func (tb *Testbed) listenTCP(addr netip.AddrPort) (net.Listener, error) {
	var l net.Listener
	err := tb.Server.Do(func() error {
		var err error
		l, err = net.Listen("tcp", addr.String())
		return err
	})
	return l, err
}

// serveDNS runs srv, once it has started, until the testbed closes.
func (tb *Testbed) serveDNS(srv *dns.Server) {
	started, served := make(chan struct{}), make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { defer close(served); _ = srv.ActivateAndServe() }()
	<-started
	tb.OnClose(func() error { err := srv.Shutdown(); <-served; return err })
}

// serveHTTP runs srv on l, over TLS (srv.TLSConfig) if overTLS, until the
// testbed closes.
func (tb *Testbed) serveHTTP(srv *http.Server, l net.Listener, overTLS bool) {
	served := serve(srv, l, overTLS)
	tb.OnClose(func() error {
		err := srv.Close()
		<-served
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		return err
	})
}

// serve runs srv on l, over TLS (srv.TLSConfig) if overTLS, in a goroutine
// of its own; the channel closes when Serve returns.
func serve(srv *http.Server, l net.Listener, overTLS bool) <-chan struct{} {
	served := make(chan struct{})
	go func() {
		defer close(served)
		if overTLS {
			_ = srv.ServeTLS(l, "", "")
		} else {
			_ = srv.Serve(l)
		}
	}()
	return served
}

// stopper stops srv, giving the requests in flight up to grace to finish
// if graceful, then closes it, runs after (if set) and waits for served.
func stopper(srv interface {
	Shutdown(context.Context) error
	Close() error
}, served <-chan struct{}, after func()) func(graceful bool) {
	return func(graceful bool) {
		if graceful {
			ctx, cancel := context.WithTimeout(context.Background(), restartGrace)
			_ = srv.Shutdown(ctx)
			cancel()
		}
		_ = srv.Close()
		if after != nil {
			after()
		}
		<-served
	}
}
