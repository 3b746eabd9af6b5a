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

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
)

// startLoopbackNginx runs nginx on loopback (testbed.RunNginx), serving
// dir/www over HTTP on one address and HTTPS (a certificate of a new CA)
// on another; "" if nginx is not installed. It returns the two addresses
// and the CA's PEM file.
func startLoopbackNginx(b testing.TB, dir string) (plain, secure, caFile string) {
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

// bigObjectNginx serves an object of benchSize bytes (zeros, from the
// page cache) as /big from nginx on loopback, over HTTP and HTTPS, for
// curl: the addresses and the CA's PEM file. Without curl or nginx it
// skips b.
func bigObjectNginx(b testing.TB) (size int64, plain, secure, caFile string) {
	if _, err := exec.LookPath("curl"); err != nil {
		b.Skip("needs curl")
	}
	size = benchSize()
	dir := b.TempDir()
	www := filepath.Join(dir, "www")
	os.MkdirAll(www, 0o755)
	f, err := os.Create(filepath.Join(www, "big"))
	if err != nil {
		b.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		b.Fatal(err)
	}
	f.Close()
	if plain, secure, caFile = startLoopbackNginx(b, dir); plain == "" {
		b.Skip("needs nginx")
	}
	return size, plain, secure, caFile
}

// BenchmarkProxyCurlNginx downloads an object (1 GB; INTENTS_BENCH_SIZE
// if set) from nginx with curl, each in a process of its own, over
// loopback: direct, through this proxy (plain HTTP forwarded, HTTPS
// through a CONNECT tunnel) and through tinyproxy, one way after the
// other in each iteration. It reports
// each way's goodput (curl's) and the proxied ones as a fraction of the
// direct one's.
func BenchmarkProxyCurlNginx(b *testing.B) {
	size, plain, secure, caFile := bigObjectNginx(b)
	s, addr := benchProxy(b)
	sp, pp := loopbackPort(secure), loopbackPort(plain)
	s.AnyPort, s.Ports = false, []uint16{uint16(sp), uint16(pp)}
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

// startSquid runs Debian's squid on loopback as a plain forward proxy (no
// cache, no logs), in the foreground as one process (-N), tunnelling to
// connectPort; "" if squid is not installed.
func startSquid(b *testing.B, connectPort int) (string, *os.Process) {
	bin, err := exec.LookPath("squid")
	if err != nil {
		if _, err := os.Stat("/usr/sbin/squid"); err != nil {
			b.Log("no squid (apt-get install squid): not compared")
			return "", nil
		}
		bin = "/usr/sbin/squid"
	}
	addr := freeLoopbackAddr(b)
	dir := b.TempDir()
	os.Chmod(dir, 0o777) // squid drops root for its own user
	conf := filepath.Join(dir, "squid.conf")
	text := fmt.Sprintf(`http_port %s
acl localnet src 127.0.0.1
acl tunnelled port %d
acl CONNECT method CONNECT
http_access deny CONNECT !tunnelled
http_access allow localnet
http_access deny all
cache deny all
cache_mem 0
access_log none
cache_store_log none
cache_log %s
pid_filename %s
coredump_dir %s
shutdown_lifetime 0 seconds
`, addr, connectPort, filepath.Join(dir, "cache.log"), filepath.Join(dir, "squid.pid"), dir)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-N", "-f", conf)
	testbed.StartDaemon(b, cmd, accepting(addr), os.Kill)
	return addr, cmd.Process
}

// processCPU is the user and system time of process pid and of its
// children alive now, from /proc.
func processCPU(b testing.TB, pid int) time.Duration {
	ticks := func(stat string) (ppid, t int64) {
		// The command name, in parentheses, may hold spaces: fields
		// count from after its closing one.
		f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
		ppid, _ = strconv.ParseInt(f[1], 10, 64)
		utime, _ := strconv.ParseInt(f[11], 10, 64)
		stime, _ := strconv.ParseInt(f[12], 10, 64)
		return ppid, utime + stime
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	_, total := ticks(string(stat))
	all, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range all {
		stat, err := os.ReadFile(f)
		if err != nil {
			continue // gone since
		}
		if ppid, t := ticks(string(stat)); ppid == int64(pid) {
			total += t
		}
	}
	const clockTicks = 100 // USER_HZ, what /proc counts in on Linux
	return time.Duration(total) * time.Second / clockTicks
}

// BenchmarkProxyCPU downloads an object (1 GB; INTENTS_BENCH_SIZE if set)
// from nginx with curl, each in a process of its own, over loopback:
// direct, and through this proxy, tinyproxy and squid (Debian's, a plain
// forward proxy), as plain HTTP forwarded, HTTPS through a CONNECT
// tunnel, and (this proxy only) HTTPS through a SOCKS5 tunnel; one way
// after the other in each iteration. It reports each proxy's CPU time
// (its process's user and system time over the download; this proxy is
// the benchmark's process, where nothing else runs meanwhile) per GB
// relayed, each way's goodput, and this proxy's figures over the others'
// (and a second squid's over squid's: the ratios' own noise).
func BenchmarkProxyCPU(b *testing.B) {
	size, plain, secure, caFile := bigObjectNginx(b)
	s, addr := benchProxy(b)
	sp, pp := loopbackPort(secure), loopbackPort(plain)
	s.AnyPort, s.Ports = false, []uint16{uint16(sp), uint16(pp)}
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	socksDone := make(chan error, 1)
	go func() { socksDone <- s.ServeSOCKS(sl, intents.Intents{}) }()
	b.Cleanup(func() { sl.Close(); <-socksDone })

	self := func() time.Duration { return cpu() }
	type way struct {
		name, url, proxy string
		cpu              func() time.Duration // the proxy's; nil: direct
	}
	httpURL, httpsURL := "http://"+plain+"/big", "https://"+secure+"/big"
	ways := []way{
		{"http-direct", httpURL, "", nil},
		{"https-direct", httpsURL, "", nil},
		{"http-intents", httpURL, "http://" + addr, self},
		{"connect-intents", httpsURL, "http://" + addr, self},
		{"socks5-intents", httpsURL, "socks5h://" + sl.Addr().String(), self},
	}
	if tiny, p := startTinyproxyProcess(b, sp); tiny != "" {
		c := func() time.Duration { return processCPU(b, p.Pid) }
		ways = append(ways, way{"http-tinyproxy", httpURL, "http://" + tiny, c}, way{"connect-tinyproxy", httpsURL, "http://" + tiny, c})
	}
	if squid, p := startSquid(b, sp); squid != "" {
		c := func() time.Duration { return processCPU(b, p.Pid) }
		ways = append(ways, way{"http-squid", httpURL, "http://" + squid, c}, way{"connect-squid", httpsURL, "http://" + squid, c})
		// A second squid, measured as a contender of its own: what the
		// ratios against squid make of this machine's noise.
		twin, tp := startSquid(b, sp)
		tc := func() time.Duration { return processCPU(b, tp.Pid) }
		ways = append(ways, way{"http-squidtwin", httpURL, "http://" + twin, tc}, way{"connect-squidtwin", httpsURL, "http://" + twin, tc})
	}
	took := make(map[string]float64)
	cpus := make(map[string]time.Duration)
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, w := range ways {
			args := []string{"-sS", "--fail", "--http1.1", "-o", "/dev/null", "--cacert", caFile, "-w", "%{time_total} %{size_download}"}
			if w.proxy != "" {
				args = append(args, "-x", w.proxy)
			}
			var c0 time.Duration
			if w.cpu != nil {
				c0 = w.cpu()
			}
			out, err := exec.Command("curl", append(args, w.url)...).Output()
			if err != nil {
				b.Fatalf("%s: %v", w.name, err)
			}
			if w.cpu != nil {
				cpus[w.name] += w.cpu() - c0
			}
			f := strings.Fields(string(out))
			secs, _ := strconv.ParseFloat(f[0], 64)
			if n, _ := strconv.ParseInt(f[1], 10, 64); n != size {
				b.Fatalf("%s: %d of %d bytes", w.name, n, size)
			}
			took[w.name] += secs
		}
	}
	b.StopTimer()
	gb := float64(size) * float64(b.N) / 1e9
	for _, w := range ways {
		b.ReportMetric(gb*1e3/took[w.name], w.name+"-MB/s")
		if w.cpu != nil {
			b.ReportMetric(cpus[w.name].Seconds()/gb, w.name+"-cpu-s/GB")
		}
	}
	// This proxy's CPU and goodput over the others', way by way; SOCKS5
	// against their CONNECT, the same relay of a tunnel's bytes.
	for _, other := range []string{"tinyproxy", "squid"} {
		for _, pair := range [][2]string{{"http", "http"}, {"connect", "connect"}, {"socks5", "connect"}, {"http", "squidtwin"}, {"connect", "squidtwin"}} {
			ours, theirs := pair[0]+"-intents", pair[1]+"-"+other
			if pair[1] == "squidtwin" {
				if other != "squid" {
					continue
				}
				// The twin's ratios: how far a copy of squid is from squid.
				ours, theirs = pair[0]+"-squidtwin", pair[0]+"-squid"
			}
			if _, ok := took[theirs]; !ok {
				continue
			}
			name := pair[0]
			if pair[1] == "squidtwin" {
				name += "-twin"
			}
			if cpus[theirs] > 0 {
				b.ReportMetric(cpus[ours].Seconds()/cpus[theirs].Seconds(), name+"-cpu/"+other)
			}
			b.ReportMetric(took[theirs]/took[ours], name+"-goodput/"+other)
		}
	}
}
