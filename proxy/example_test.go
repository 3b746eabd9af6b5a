package proxy_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/policy"
	"github.com/sockintents/intents/proxy"
)

// A proxy for programs that cannot carry intents: their requests through
// this listener are bulk transfers, those to *.videocdn.example streams.
func ExampleServer() {
	m, err := intents.NewManager(intents.Config{Policy: &policy.EAF{}, NoWatch: true})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	rules, err := proxy.ParseRules(strings.NewReader("*.videocdn.example category=stream,prohibit=expensive\n"))
	if err != nil {
		log.Fatal(err)
	}
	s := &proxy.Server{
		Transport: &intents.Transport{Manager: m},
		Dialer:    &intents.Dialer{Manager: m},
		Rules:     rules,
		// The origin below is on this host, at a port of its own.
		AllowLocal: true,
		AnyPort:    true,
	}
	defer s.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go s.Serve(l, intents.Intents{Category: intents.CategoryBulk})

	// A client that knows nothing of intents, told to use the proxy.
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello through %s", r.Header.Get("Via"))
	}))
	defer origin.Close()
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: l.Addr().String()})}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(origin.URL)
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(body))
	// Output: hello through 1.1 intents-proxy
}

// An HTTPS proxy: browsers reach it with HTTP/2 and send it a whole
// page's requests at once (chromium --proxy-server=https://ADDR); net/http
// reaches it with HTTP/1.1 over TLS.
func ExampleServer_ServeTLS() {
	m, err := intents.NewManager(intents.Config{Policy: &policy.EAF{}, NoWatch: true})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	// A browser's connection limits: a browser hands over a page at once.
	tr := &intents.Transport{Manager: m, MaxConnsPerHost: intents.DefaultMaxConnsPerHost, MaxConns: intents.DefaultMaxConns}
	// The origin below is on this host, at a port of its own.
	s := &proxy.Server{Transport: tr, Dialer: &intents.Dialer{Manager: m}, AllowLocal: true, AnyPort: true}
	defer s.Close()
	// The proxy's certificate: here httptest's, for 127.0.0.1.
	certified := httptest.NewTLSServer(http.NotFoundHandler())
	defer certified.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go s.ServeTLS(l, &tls.Config{Certificates: certified.TLS.Certificates}, intents.Intents{})

	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello through %s", r.Header.Get("Via"))
	}))
	defer origin.Close()
	client := certified.Client().Transport.(*http.Transport).Clone() // trusts the certificate
	client.Proxy = http.ProxyURL(&url.URL{Scheme: "https", Host: l.Addr().String()})
	defer client.CloseIdleConnections()
	resp, err := (&http.Client{Transport: client}).Get(origin.URL)
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(body))
	// Output: hello through 1.1 intents-proxy
}

func ExampleParseRules() {
	rules, err := proxy.ParseRules(strings.NewReader(`
# video from the CDN on the wired path, never on cellular
*.videocdn.example  category=stream,prefer=wired,prohibit=cellular
10.0.0.0/8          require=eth0
`))
	if err != nil {
		log.Fatal(err)
	}
	for _, host := range []string{"a.videocdn.example", "10.1.2.3", "example.org"} {
		for _, r := range rules {
			if r.Match(host) {
				fmt.Printf("%s: %s\n", host, r.Intents)
				break
			}
		}
	}
	// Output:
	// a.videocdn.example: category=stream,prohibit=cellular,prefer=wired
	// 10.1.2.3: require=eth0
}

// The metrics listener, for a Prometheus scraper on this host: loopback
// clients only (MetricsAllow widens it), a few at a time.
func ExampleServer_ServeMetrics() {
	m, err := intents.NewManager(intents.Config{Policy: &policy.EAF{}, NoWatch: true})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	s := &proxy.Server{Transport: &intents.Transport{Manager: m}, Dialer: &intents.Dialer{Manager: m}}
	defer s.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go s.ServeMetrics(l)

	resp, err := http.Get("http://" + l.Addr().String() + "/metrics")
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.Status, resp.Header.Get("Content-Type"))
	// Output: 200 OK text/plain; version=0.0.4; charset=utf-8
}

// The proxy's own certificate for an HTTPS listener, made on first use
// and reused after: a browser told once to accept it (Chromium by its
// key, Firefox by its authority) keeps accepting it.
func ExampleLoadOwnCertificate() {
	dir, err := os.MkdirTemp("", "intents")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	for range 2 {
		own, err := proxy.LoadOwnCertificate(dir, []string{"127.0.0.1", "localhost"})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("made:", own.Made, "names:", own.Certificate.Leaf.DNSNames, own.Certificate.Leaf.IPAddresses)
	}
	// Output:
	// made: true names: [localhost] [127.0.0.1]
	// made: false names: [localhost] [127.0.0.1]
}

// Control on the Dialer of the Server and of its Transport refuses, at
// connect, what the destination policy refuses by name: a name that
// resolves to the proxy's own host.
func ExampleServer_Control() {
	m, err := intents.NewManager(intents.Config{Policy: &policy.EAF{}, NoWatch: true})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	s := &proxy.Server{}
	d := &intents.Dialer{Manager: m, Control: s.Control}
	s.Dialer, s.Transport = d, &intents.Transport{Manager: m, Dialer: d}
	defer s.Close()

	fmt.Println(s.Control("tcp", "127.0.0.1:25", nil))
	fmt.Println(s.Control("tcp", "192.0.2.1:443", nil))
	// Output:
	// the destination is on the proxy's own host
	// <nil>
}

// A transparent listener for connections a packet filter redirects to
// it, such as, for the programs of user app:
//
//	nft add rule ip intents out meta skuid app ip daddr != 127.0.0.0/8 tcp dport '{ 80, 443 }' redirect to :8089
func ExampleServer_ServeTransparent() {
	m, err := intents.NewManager(intents.Config{Policy: &policy.EAF{}, NoWatch: true})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	d := &intents.Dialer{Manager: m}
	s := &proxy.Server{Dialer: d, Transport: &intents.Transport{Manager: m, Dialer: d}}
	l, err := net.Listen("tcp", "127.0.0.1:8089")
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(s.ServeTransparent(l, intents.Intents{Category: intents.CategoryBulk}))
}
