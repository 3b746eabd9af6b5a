package proxy

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sockintents/intents/internal/testbed"
)

// startLoopbackNginx runs nginx on loopback, serving dir/www over HTTP on
// one port and HTTPS (a certificate of a new CA) on another; "" if nginx
// is not installed. It returns the two addresses and the CA's PEM file.
func startLoopbackNginx(b *testing.B, dir string) (plain, secure, caFile string) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, err := os.Stat("/usr/sbin/nginx"); err != nil {
			b.Log("no nginx: not compared")
			return "", "", ""
		}
		bin = "/usr/sbin/nginx"
	}
	ports := make([]string, 2)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		_, ports[i], _ = net.SplitHostPort(l.Addr().String())
		l.Close()
	}
	ca, err := testbed.NewCA()
	if err != nil {
		b.Fatal(err)
	}
	if caFile, err = ca.WritePEM(dir); err != nil {
		b.Fatal(err)
	}
	cert, key, err := ca.ServerPEM()
	if err != nil {
		b.Fatal(err)
	}
	for name, data := range map[string][]byte{"server.pem": cert, "server.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	conf := fmt.Sprintf(`user root; daemon off; worker_processes 1; pid %[1]s/nginx.pid; error_log %[1]s/error.log warn;
events { worker_connections 256; }
http { access_log off; client_body_temp_path %[1]s/tmp; proxy_temp_path %[1]s/tmp; fastcgi_temp_path %[1]s/tmp;
	uwsgi_temp_path %[1]s/tmp; scgi_temp_path %[1]s/tmp; default_type application/octet-stream; sendfile on;
	server { listen 127.0.0.1:%[2]s; listen 127.0.0.1:%[3]s ssl; ssl_certificate %[1]s/server.pem;
		ssl_certificate_key %[1]s/server.key; root %[1]s/www; } }
`, dir, ports[0], ports[1])
	os.MkdirAll(filepath.Join(dir, "tmp"), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := pinned(bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", filepath.Join(dir, "nginx.conf"))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	plain, secure = "127.0.0.1:"+ports[0], "127.0.0.1:"+ports[1]
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", secure, time.Second)
		if err == nil {
			c.Close()
			return plain, secure, caFile
		}
		if i == 100 {
			b.Fatalf("nginx does not accept: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // nginx gives no other sign of being ready
	}
}

// pinned is name with args, on the CPUs INTENTS_BENCH_CPUS lists (taskset's
// syntax) if it is set: with the benchmark itself pinned elsewhere
// (taskset -c 1 go test ...), the proxy has a core of its own and curl
// and nginx share the other, so what the proxy costs the transfer shows
// apart from what it takes from their CPU.
func pinned(name string, args ...string) *exec.Cmd {
	if cpus := os.Getenv("INTENTS_BENCH_CPUS"); cpus != "" {
		return exec.Command("taskset", append([]string{"-c", cpus, name}, args...)...)
	}
	return exec.Command(name, args...)
}

// BenchmarkProxyCurlNginx downloads an object (1 GB; INTENTS_BENCH_SIZE
// if set) from nginx with curl, each in a process of its own, over
// loopback: direct, through this proxy (plain HTTP forwarded, HTTPS
// through a CONNECT tunnel) and through tinyproxy, in turns. It reports
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
	s.ConnectPorts = []uint16{uint16(sp)}
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
			args := []string{"-sS", "--fail", "-o", "/dev/null", "--cacert", caFile, "-w", "%{time_total} %{size_download}"}
			if w.proxy != "" {
				args = append(args, "-x", w.proxy)
			}
			out, err := pinned("curl", append(args, w.url)...).Output()
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
