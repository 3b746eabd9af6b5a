package proxy

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sockintents/intents/internal/testbed"
)

// startLoopbackNginx runs nginx on loopback (testbed.RunNginx), serving
// dir/www over HTTP on one address and HTTPS (a certificate of a new CA)
// on another; "" if nginx is not installed. It returns the two addresses
// and the CA's PEM file.
func startLoopbackNginx(b *testing.B, dir string) (plain, secure, caFile string) {
	if _, err := exec.LookPath("nginx"); err != nil {
		if _, err := os.Stat("/usr/sbin/nginx"); err != nil {
			b.Log("no nginx: not compared")
			return "", "", ""
		}
	}
	ca, err := testbed.NewCA()
	if err != nil {
		b.Fatal(err)
	}
	plain, secure = freeLoopbackAddr(b), freeLoopbackAddr(b)
	testbed.RunNginx(b, nil, dir, plain, secure, ca, pinning()...)
	return plain, secure, filepath.Join(dir, "ca.pem")
}

// pinning is the command prefix that runs a process on the CPUs
// INTENTS_BENCH_CPUS lists (taskset's syntax), if it is set: with the
// benchmark itself pinned elsewhere (taskset -c 1 go test ...), the proxy
// has a core of its own and curl and nginx share the other, so what the
// proxy costs the transfer shows apart from what it takes from their CPU.
func pinning() []string {
	if cpus := os.Getenv("INTENTS_BENCH_CPUS"); cpus != "" {
		return []string{"taskset", "-c", cpus}
	}
	return nil
}

// BenchmarkProxyCurlNginx downloads an object (1 GB; INTENTS_BENCH_SIZE
// if set) from nginx with curl, each in a process of its own, over
// loopback: direct, through this proxy (plain HTTP forwarded, HTTPS
// through a CONNECT tunnel) and through tinyproxy, one way after the
// other in each iteration. It reports
// each way's goodput (curl's) and the proxied ones as a fraction of the
// direct one's.
func BenchmarkProxyCurlNginx(b *testing.B) {
	if _, err := exec.LookPath("curl"); err != nil {
		b.Skip("needs curl")
	}
	size := int64(1 << 30)
	if v, err := strconv.ParseInt(os.Getenv("INTENTS_BENCH_SIZE"), 10, 64); err == nil && v > 0 {
		size = v
	}
	dir := b.TempDir()
	www := filepath.Join(dir, "www")
	os.MkdirAll(www, 0o755)
	f, err := os.Create(filepath.Join(www, "big"))
	if err != nil {
		b.Fatal(err)
	}
	if err := f.Truncate(size); err != nil { // zeros, from the page cache
		b.Fatal(err)
	}
	f.Close()
	plain, secure, caFile := startLoopbackNginx(b, dir)
	if plain == "" {
		b.Skip("needs nginx")
	}
	s, addr := benchProxy(b)
	_, sport, _ := net.SplitHostPort(secure)
	sp, _ := strconv.Atoi(sport)
	s.AnyPort, s.Ports = false, []uint16{uint16(sp)}
	type way struct{ name, url, proxy string }
	ways := []way{
		{"http-direct", "http://" + plain + "/big", ""},
		{"http-proxy", "http://" + plain + "/big", addr},
		{"https-direct", "https://" + secure + "/big", ""},
		{"https-connect", "https://" + secure + "/big", addr},
	}
	if tiny := startTinyproxy(b, sp); tiny != "" {
		ways = append(ways, way{"http-tinyproxy", "http://" + plain + "/big", tiny}, way{"https-tinyproxy", "https://" + secure + "/big", tiny})
	}
	took := make([]float64, len(ways))
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k, w := range ways {
			args := []string{"-sS", "--fail", "--http1.1", "-o", "/dev/null", "--cacert", caFile, "-w", "%{time_total} %{size_download}"}
			if w.proxy != "" {
				args = append(args, "-x", w.proxy)
			}
			cmd := append(pinning(), "curl")
			out, err := exec.Command(cmd[0], append(append(cmd[1:], args...), w.url)...).Output()
			if err != nil {
				b.Fatalf("%s: %v", w.name, err)
			}
			f := strings.Fields(string(out))
			secs, _ := strconv.ParseFloat(f[0], 64)
			if n, _ := strconv.ParseInt(f[1], 10, 64); n != size {
				b.Fatalf("%s: %d of %d bytes", w.name, n, size)
			}
			took[k] += secs
		}
	}
	b.StopTimer()
	for k, w := range ways {
		b.ReportMetric(float64(size)*float64(b.N)/took[k]/1e6, w.name+"-MB/s")
	}
	b.ReportMetric(took[0]/took[1], "http-proxy/direct")
	b.ReportMetric(took[2]/took[3], "https-connect/direct")
	if len(ways) > 4 {
		b.ReportMetric(took[4]/took[1], "http-proxy/tinyproxy")
		b.ReportMetric(took[5]/took[3], "https-connect/tinyproxy")
	}
}
