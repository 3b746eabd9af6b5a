package h3_test

import (
	"crypto/tls"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
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

// BenchmarkHTTP3Transport compares intents.Transport (HTTP3Always, no
// Manager) with quic-go's http3.Transport on loopback, in the same run:
// GETs of a small object over a reused HTTP/3 connection. The two
// alternate request by request and the ratio is reported (machine noise
// hits both alike).
func BenchmarkHTTP3Transport(b *testing.B) {
	s := newServer(b, true)
	url := "https://127.0.0.1:" + strconv.Itoa(s.udpPort()) + "/obj/5"
	ours := s.transport()
	ours.HTTP3Always = true
	b.Cleanup(func() { ours.Close() })
	theirs := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: s.roots}}
	b.Cleanup(func() { theirs.Close() })
	fetch(b, ours, url) // both connections made: the requests reuse them
	fetch(b, theirs, url)
	var tTheirs, tOurs time.Duration
	for b.Loop() {
		t0 := time.Now()
		fetch(b, theirs, url)
		t1 := time.Now()
		fetch(b, ours, url)
		tTheirs += t1.Sub(t0)
		tOurs += time.Since(t1)
	}
	b.ReportMetric(float64(tTheirs.Nanoseconds())/float64(b.N), "quic-go-ns/req")
	b.ReportMetric(float64(tOurs.Nanoseconds())/float64(b.N), "intents-ns/req")
	b.ReportMetric(float64(tOurs)/float64(tTheirs), "ratio")
}
