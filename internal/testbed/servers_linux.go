package testbed

import (
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
	served := make(chan struct{})
	go func() {
		defer close(served)
		if overTLS {
			_ = srv.ServeTLS(l, "", "")
		} else {
			_ = srv.Serve(l)
		}
	}()
	tb.OnClose(func() error {
		err := srv.Close()
		<-served
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		return err
	})
}
