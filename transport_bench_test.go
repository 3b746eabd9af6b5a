package intents

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
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

// BenchmarkTransport compares intents.Transport with http.Transport on
// loopback, in the same run: GETs of a small object over a reused HTTP/1.1
// connection, over HTTP/2, and over a new connection each time. The timed
// benchmarks alternate the two transports request by request and report
// the ratio (machine noise hits both alike); the -allocs ones report
// allocations of each alone.
func BenchmarkTransport(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	h1 := httptest.NewServer(handler)
	defer h1.Close()
	h2 := httptest.NewUnstartedServer(handler)
	h2.EnableHTTP2 = true
	h2.StartTLS()
	defer h2.Close()
	tlsConf := &tls.Config{RootCAs: h2.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}

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
// net/http and this package in turn, so their throughputs compare in one
// run. The pool's lock is what is measured.
func BenchmarkTransportParallel(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	h1 := httptest.NewServer(handler)
	defer h1.Close()
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 64 // every goroutine keeps its connection
	for _, rt := range []struct {
		name string
		rt   http.RoundTripper
		done func()
	}{
		{"net-http", base, base.CloseIdleConnections},
		{"intents", &Transport{Base: base.Clone()}, nil},
	} {
		b.Run(rt.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					fetch(b, rt.rt, h1.URL)
				}
			})
		})
		if tr, ok := rt.rt.(*Transport); ok {
			tr.Close()
		} else {
			rt.done()
		}
	}
}
