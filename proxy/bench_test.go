package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
	"github.com/sockintents/intents/policy"
)

// benchProxy is a proxy over the loopback path for benchmarks, tunnelling
// to any port.
func benchProxy(b *testing.B) (*Server, string) {
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "lo"}}, Policy: &policy.EAF{}, NoWatch: true})
	if err != nil {
		b.Fatal(err)
	}
	// The origins are on loopback, and on ports of their own.
	s := &Server{Transport: &intents.Transport{Manager: m}, Dialer: &intents.Dialer{Manager: m}, AllowLocal: true, AnyPort: true}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l, intents.Intents{}) }()
	b.Cleanup(func() {
		s.Close()
		<-done
		s.Transport.CloseIdleConnections()
		m.Close()
	})
	return s, l.Addr().String()
}

// sink serves /N: N bytes, from one buffer.
func sink() http.Handler {
	buf := make([]byte, 1<<20)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseInt(r.URL.Path[1:], 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		for n > 0 {
			k, err := w.Write(buf[:min(n, int64(len(buf)))])
			if err != nil {
				return
			}
			n -= int64(k)
		}
	})
}

// freeLoopbackAddr is a loopback address with a port free now, for a
// server of another process to take.
func freeLoopbackAddr(b testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// loopbackPort is addr's port.
func loopbackPort(addr string) int {
	p, _ := strconv.Atoi(port(addr))
	return p
}

// benchSize is the size of the benchmarks' downloads: 1 GB, or
// INTENTS_BENCH_SIZE bytes if set.
func benchSize() int64 {
	if v, err := strconv.ParseInt(os.Getenv("INTENTS_BENCH_SIZE"), 10, 64); err == nil && v > 0 {
		return v
	}
	return 1 << 30
}

// accepting is a daemon's readiness: a dial to addr succeeds.
func accepting(addr string) func() error {
	return func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
}

// startTinyproxy runs tinyproxy (Debian's) on loopback, tunnelling to
// connectPort, for the benchmarks to set this proxy beside one users run;
// "" if it is not installed.
func startTinyproxy(b testing.TB, connectPort int) string {
	addr, _ := startTinyproxyProcess(b, connectPort)
	return addr
}

// startTinyproxyProcess is startTinyproxy that also returns tinyproxy's
// process, whose CPU time a benchmark reads.
func startTinyproxyProcess(b testing.TB, connectPort int) (string, *os.Process) {
	bin, err := exec.LookPath("tinyproxy")
	if err != nil {
		b.Log("no tinyproxy (apt-get install tinyproxy): not compared")
		return "", nil
	}
	addr := freeLoopbackAddr(b)
	_, port, _ := net.SplitHostPort(addr)
	conf := filepath.Join(b.TempDir(), "tinyproxy.conf")
	text := fmt.Sprintf("Port %s\nListen 127.0.0.1\nTimeout 600\nMaxClients 1000\nAllow 127.0.0.1\nConnectPort %d\nLogLevel Critical\n", port, connectPort)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-d", "-c", conf)
	testbed.StartDaemon(b, cmd, accepting(addr), os.Kill)
	return addr, cmd.Process
}

// BenchmarkProxyDownload downloads an object (1 GB; INTENTS_BENCH_SIZE
// bytes if set) over loopback four ways, one after the other in each
// iteration:
// plain HTTP direct and through the proxy (forwarded by its Transport),
// HTTPS direct and through a CONNECT tunnel. It reports each way's
// goodput, the proxied ones as a fraction of the direct one's, and the
// process's CPU time per GB of each (client, server and proxy share the
// process: the proxy's own cost is the difference).
func BenchmarkProxyDownload(b *testing.B) {
	size := benchSize()
	plain := httptest.NewServer(sink())
	defer plain.Close()
	secure := httptest.NewTLSServer(sink())
	defer secure.Close()
	s, addr := benchProxy(b)
	p := loopbackPort(secure.Listener.Addr().String())
	s.AnyPort, s.Ports = false, []uint16{uint16(p), uint16(loopbackPort(plain.Listener.Addr().String()))}
	tlsConf := secure.Client().Transport.(*http.Transport).TLSClientConfig
	proxyURL := http.ProxyURL(&url.URL{Scheme: "http", Host: addr})
	type way struct {
		name   string
		url    string
		client *http.Client
	}
	ways := []way{
		{"http-direct", plain.URL, &http.Client{Transport: &http.Transport{}}},
		{"http-proxy", plain.URL, &http.Client{Transport: &http.Transport{Proxy: proxyURL}}},
		{"https-direct", secure.URL, &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf.Clone()}}},
		{"https-connect", secure.URL, &http.Client{Transport: &http.Transport{Proxy: proxyURL, TLSClientConfig: tlsConf.Clone()}}},
	}
	if tiny := startTinyproxy(b, p); tiny != "" {
		tinyURL := http.ProxyURL(&url.URL{Scheme: "http", Host: tiny})
		ways = append(ways,
			way{"http-tinyproxy", plain.URL, &http.Client{Transport: &http.Transport{Proxy: tinyURL}}},
			way{"https-tinyproxy", secure.URL, &http.Client{Transport: &http.Transport{Proxy: tinyURL, TLSClientConfig: tlsConf.Clone()}}})
	}
	took := make([]time.Duration, len(ways))
	cpus := make([]time.Duration, len(ways))
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k, w := range ways {
			// Each download on a new connection, as a new tunnel would be.
			w.client.CloseIdleConnections()
			start, c0 := time.Now(), cpu()
			resp, err := w.client.Get(w.url + "/" + strconv.FormatInt(size, 10))
			if err != nil {
				b.Fatal(w.name, err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || n != size {
				b.Fatalf("%s: %d of %d bytes: %v", w.name, n, size, err)
			}
			took[k] += time.Since(start)
			cpus[k] += cpu() - c0
		}
	}
	b.StopTimer()
	gb := float64(size) * float64(b.N) / 1e9
	for k, w := range ways {
		b.ReportMetric(float64(size)*float64(b.N)/took[k].Seconds()/1e6, w.name+"-MB/s")
		b.ReportMetric(cpus[k].Seconds()/gb, w.name+"-cpu-s/GB")
		w.client.CloseIdleConnections()
	}
	b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "http-proxy/direct")
	b.ReportMetric(took[2].Seconds()/took[3].Seconds(), "https-connect/direct")
	if len(ways) > 4 {
		b.ReportMetric(took[4].Seconds()/took[1].Seconds(), "http-proxy/tinyproxy")
		b.ReportMetric(took[5].Seconds()/took[3].Seconds(), "https-connect/tinyproxy")
	}
}

// BenchmarkProxySmallGET fetches a 100-byte object over a kept-alive
// connection, direct and through the proxy alternately, and reports the
// median time each and the median added by the proxy.
func BenchmarkProxySmallGET(b *testing.B) {
	upstream := httptest.NewServer(sink())
	defer upstream.Close()
	_, addr := benchProxy(b)
	direct := &http.Client{Transport: &http.Transport{}}
	proxied := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr})}}
	defer direct.CloseIdleConnections()
	defer proxied.CloseIdleConnections()
	var tiny *http.Client
	if a := startTinyproxy(b, 443); a != "" {
		tiny = &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: a})}}
		defer tiny.CloseIdleConnections()
	}
	get := func(c *http.Client) time.Duration {
		start := time.Now()
		resp, err := c.Get(upstream.URL + "/100")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return time.Since(start)
	}
	get(direct) // the connections, open
	get(proxied)
	var ts []time.Duration
	if tiny != nil {
		get(tiny)
	}
	ds := make([]time.Duration, 0, b.N)
	ps := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ds = append(ds, get(direct))
		ps = append(ps, get(proxied))
		if tiny != nil {
			ts = append(ts, get(tiny))
		}
	}
	b.StopTimer()
	med := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	md, mp := med(ds), med(ps)
	b.ReportMetric(float64(md.Microseconds()), "direct-µs")
	b.ReportMetric(float64(mp.Microseconds()), "proxy-µs")
	b.ReportMetric(float64((mp - md).Microseconds()), "added-µs")
	if tiny != nil {
		b.ReportMetric(float64((med(ts) - md).Microseconds()), "tinyproxy-added-µs")
	}
}

// BenchmarkProxyIdleTunnels opens 1,000 CONNECT tunnels to a server that
// accepts and holds its connections without a goroutine each, leaves them
// idle, and reports the process's heap and stack growth per tunnel (the
// proxy's share: its clients are bare sockets too) and its RSS growth.
func BenchmarkProxyIdleTunnels(b *testing.B) {
	const tunnels = 1000
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	held := make(chan net.Conn, tunnels)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held <- c
		}
	}()
	s, addr := benchProxy(b)
	s.MaxTunnels, s.MaxTunnelsPerClient = 2*tunnels, 2*tunnels
	_, port, _ := net.SplitHostPort(l.Addr().String())
	p, _ := strconv.Atoi(port)
	s.AnyPort, s.Ports = false, []uint16{uint16(p)}
	memory := func() (inuse, rss uint64) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		statm, _ := os.ReadFile("/proc/self/statm")
		var pages uint64
		if f := strings.Fields(string(statm)); len(f) > 1 {
			pages, _ = strconv.ParseUint(f[1], 10, 64)
		}
		return ms.HeapInuse + ms.StackInuse, pages * uint64(os.Getpagesize())
	}
	for i := 0; i < b.N; i++ {
		inuse0, rss0 := memory()
		clients := make([]net.Conn, 0, tunnels)
		for range tunnels {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", l.Addr(), l.Addr())
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("tunnel: %v %v", resp, err)
			}
			clients = append(clients, c)
		}
		inuse1, rss1 := memory()
		b.ReportMetric(float64(inuse1-inuse0)/tunnels, "heap+stack-B/tunnel")
		b.ReportMetric(float64(int64(rss1)-int64(rss0))/tunnels, "rss-B/tunnel")
		for _, c := range clients {
			c.Close()
		}
		for range tunnels {
			(<-held).Close()
		}
	}
}
