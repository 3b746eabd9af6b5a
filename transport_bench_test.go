package intents

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"
)

func fetch(b *testing.B, rt http.RoundTripper, url string) {
	req, _ := http.NewRequest("GET", url, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		b.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// helloServers starts an HTTP/1.1 and an HTTP/2 (TLS) server answering
// "hello", closed when b ends, and a TLS config that trusts the second.
func helloServers(b *testing.B) (h1, h2 *httptest.Server, tlsConf *tls.Config) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	h1 = httptest.NewServer(handler)
	b.Cleanup(h1.Close)
	h2 = httptest.NewUnstartedServer(handler)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	b.Cleanup(h2.Close)
	return h1, h2, &tls.Config{RootCAs: h2.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
}

// BenchmarkTransport compares intents.Transport with http.Transport on
// loopback, in the same run: GETs of a small object over a reused HTTP/1.1
// connection, over HTTP/2, and over a new connection each time. The timed
// benchmarks alternate the two transports request by request and report
// the ratio (machine noise hits both alike); the -allocs ones report
// allocations of each alone.
func BenchmarkTransport(b *testing.B) {
	h1, h2, tlsConf := helloServers(b)

	for _, bc := range []struct {
		name, url string
		keepAlive bool
	}{
		{"reused-h1", h1.URL, true},
		{"reused-h2", h2.URL, true},
		{"new-h1", h1.URL, false},
	} {
		base := http.DefaultTransport.(*http.Transport).Clone()
		base.TLSClientConfig = tlsConf
		base.DisableKeepAlives = !bc.keepAlive
		ours := &Transport{Base: base}
		theirs := base.Clone()
		b.Run(bc.name, func(b *testing.B) {
			var tTheirs, tOurs time.Duration
			for b.Loop() {
				t0 := time.Now()
				fetch(b, theirs, bc.url)
				t1 := time.Now()
				fetch(b, ours, bc.url)
				tTheirs += t1.Sub(t0)
				tOurs += time.Since(t1)
			}
			b.ReportMetric(float64(tTheirs.Nanoseconds())/float64(b.N), "net-http-ns/req")
			b.ReportMetric(float64(tOurs.Nanoseconds())/float64(b.N), "intents-ns/req")
			b.ReportMetric(float64(tOurs)/float64(tTheirs), "ratio")
		})
		for _, rt := range []struct {
			name string
			rt   http.RoundTripper
		}{{"net-http", theirs}, {"intents", ours}} {
			b.Run(bc.name+"/"+rt.name+"-allocs", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					fetch(b, rt.rt, bc.url)
				}
			})
		}
		ours.CloseIdleConnections()
		theirs.CloseIdleConnections()
	}
}

// BenchmarkTransportParallel is reused-connection GETs of a small object to
// one host from parallel goroutines (b.RunParallel; run with -cpu 1,2):
// each goroutine alternates net/http and this package request by request,
// so machine noise hits both alike, and the ratio of their times is
// reported (throughput is its inverse). The pool's lock is what is
// measured.
func BenchmarkTransportParallel(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	h1 := httptest.NewServer(handler)
	defer h1.Close()
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 64 // every goroutine keeps its connection
	theirs := base.Clone()
	ours := &Transport{Base: base.Clone()}
	defer theirs.CloseIdleConnections()
	defer ours.Close()
	var tTheirs, tOurs atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			t0 := time.Now()
			fetch(b, theirs, h1.URL)
			t1 := time.Now()
			fetch(b, ours, h1.URL)
			tTheirs.Add(int64(t1.Sub(t0)))
			tOurs.Add(int64(time.Since(t1)))
		}
	})
	b.ReportMetric(float64(tTheirs.Load())/float64(b.N), "net-http-ns/req")
	b.ReportMetric(float64(tOurs.Load())/float64(b.N), "intents-ns/req")
	b.ReportMetric(float64(tOurs.Load())/float64(tTheirs.Load()), "ratio")
}

// clientConnRT sends every request on one http.ClientConn with a state
// hook set, as the Transport's pool does, and nothing else: the floor of
// what going through the ClientConn API costs.
type clientConnRT struct {
	cc      *http.ClientConn
	reserve bool // take a slot first, as the pool does
}

func (c *clientConnRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.reserve {
		if err := c.cc.Reserve(); err != nil {
			return nil, err
		}
	}
	return c.cc.RoundTrip(r)
}

// BenchmarkClientConnFloor compares http.Transport with a bare
// http.ClientConn (the API the Transport's pool is built on) on a reused
// connection, in the same loop: what of the Transport's ratio in
// BenchmarkTransport is the ClientConn API's own.
func BenchmarkClientConnFloor(b *testing.B) {
	h1, h2, tlsConf := helloServers(b)
	for _, bc := range []struct {
		name string
		srv  *httptest.Server
	}{{"h1", h1}, {"h2", h2}} {
		base := http.DefaultTransport.(*http.Transport).Clone()
		base.TLSClientConfig = tlsConf
		theirs := base.Clone()
		u, _ := url.Parse(bc.srv.URL)
		cc, err := base.NewClientConn(context.Background(), u.Scheme, u.Host)
		if err != nil {
			b.Fatal(err)
		}
		cc.SetStateHook(func(*http.ClientConn) {})
		bare := &clientConnRT{cc: cc}
		reserving := &clientConnRT{cc: cc, reserve: true}
		b.Run(bc.name, func(b *testing.B) {
			var tTheirs, tBare, tReserving time.Duration
			for b.Loop() {
				t0 := time.Now()
				fetch(b, theirs, bc.srv.URL)
				t1 := time.Now()
				fetch(b, bare, bc.srv.URL)
				t2 := time.Now()
				fetch(b, reserving, bc.srv.URL)
				tTheirs += t1.Sub(t0)
				tBare += t2.Sub(t1)
				tReserving += time.Since(t2)
			}
			b.ReportMetric(float64(tBare)/float64(tTheirs), "ratio")
			b.ReportMetric(float64(tReserving)/float64(tTheirs), "reserving-ratio")
		})
		b.Run(bc.name+"/clientconn-allocs", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				fetch(b, bare, bc.srv.URL)
			}
		})
		cc.Close()
		theirs.CloseIdleConnections()
	}
}
