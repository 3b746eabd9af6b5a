package h3_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"

	"github.com/quic-go/quic-go/http3"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/h3"
)

// A Transport that speaks HTTP/3. With a Manager, each QUIC connection's
// socket is bound to the path the policy chose, and a connection whose
// path goes down moves to another. Without HTTP3Always it would speak
// HTTP/3 to origins that advertise it with Alt-Svc.
func ExampleDialer() {
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello over "+r.Proto) })
	// An HTTPS origin on loopback, with HTTP/3 on the same port number
	// over UDP (and a test certificate).
	origin := httptest.NewTLSServer(hello)
	defer origin.Close()
	udp, err := net.ListenPacket("udp", origin.Listener.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	srv := &http3.Server{Handler: hello, TLSConfig: http3.ConfigureTLSConfig(origin.TLS)}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(udp)
	}()
	defer func() {
		srv.Close()
		udp.Close()
		<-served
	}()
	roots := x509.NewCertPool()
	roots.AddCert(origin.Certificate())

	tr := &intents.Transport{
		HTTP3:       &h3.Dialer{},
		HTTP3Always: true,
		Base:        &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}},
	}
	defer tr.Close()
	resp, err := (&http.Client{Transport: tr}).Get(origin.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Proto, string(body))
	// Output: HTTP/3.0 hello over HTTP/3.0
}
