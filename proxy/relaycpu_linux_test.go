package proxy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sockintents/intents/internal/testbed"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The most CPU the proxy may take per GB relayed, as a fraction of
// tinyproxy's in the same run: CPU time, not wall-clock time, so a busy
// machine slows both without moving the ratio much. Measured on two
// shared cores (the least of two): plain HTTP 0.12–0.15, tunnels
// 0.09–0.10 (splice); a relay through user space takes 0.21–0.22 for
// tunnels.
const (
	maxPlainCPURatio  = 0.4
	maxTunnelCPURatio = 0.15
)

// The proxy as its users run it (the intents command, built without the
// race detector) relays a 1 GB download from nginx to curl on loopback,
// as plain HTTP, through a CONNECT tunnel and through a SOCKS5 tunnel, at
// a fraction of tinyproxy's CPU per GB. Each way is measured twice,
// alternating with tinyproxy, and its least CPU counts: a spike of the
// machine's own does not fail it, a relay that costs more every time
// does.
func TestRelayCPUAgainstTinyproxy(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads 10 GB over loopback; not in -short")
	}
	size, plain, secure, caFile := bigObjectNginx(t)
	tiny, tp := startTinyproxyProcess(t, loopbackPort(secure))
	if tiny == "" {
		t.Skip("needs tinyproxy (apt-get install tinyproxy; .ci/run installs it)")
	}
	ours := startIntentsProxy(t, buildIntents(t, "."), plain, secure)
	httpURL, httpsURL := "http://"+plain+"/big", "https://"+secure+"/big"
	ways := []relayWay{
		{"http", httpURL, ours.http, ours.pid},
		{"connect", httpsURL, ours.http, ours.pid},
		{"socks5", httpsURL, ours.socks, ours.pid},
		{"tinyproxy-http", httpURL, "http://" + tiny, tp.Pid},
		{"tinyproxy-connect", httpsURL, "http://" + tiny, tp.Pid},
	}
	least := make(map[string]time.Duration)
	for range 2 {
		for _, w := range ways {
			used := w.download(t, caFile, size)
			if l, ok := least[w.name]; !ok || used < l {
				least[w.name] = used
			}
		}
	}
	gb := float64(size) / 1e9
	for _, w := range ways {
		t.Logf("%s: %.2f s of CPU per GB", w.name, least[w.name].Seconds()/gb)
	}
	ratio := func(ours, theirs string) float64 { return least[ours].Seconds() / least[theirs].Seconds() }
	assert.LessOrEqual(t, ratio("http", "tinyproxy-http"), maxPlainCPURatio, "plain HTTP: CPU over tinyproxy's")
	assert.LessOrEqual(t, ratio("connect", "tinyproxy-connect"), maxTunnelCPURatio, "CONNECT: CPU over tinyproxy's")
	assert.LessOrEqual(t, ratio("socks5", "tinyproxy-connect"), maxTunnelCPURatio, "SOCKS5: CPU over tinyproxy's CONNECT")
}

// BenchmarkRelayAgainstBase sets the intents command built from this
// working tree beside one built from a base commit, for a change that
// touches a relay: the base is INTENTS_RELAY_BASE if set, else HEAD when
// the tree has changes, else HEAD's parent. Each iteration downloads the
// 1 GB object (INTENTS_BENCH_SIZE if set) twice through each, in both
// orders, as plain HTTP, CONNECT and SOCKS5, and it reports each proxy's
// CPU per GB and this tree's over the base's, way by way.
//
//	go test -run XXX -bench BenchmarkRelayAgainstBase -benchtime 2x ./proxy/
func BenchmarkRelayAgainstBase(b *testing.B) {
	base := os.Getenv("INTENTS_RELAY_BASE")
	if base == "" {
		base = "HEAD"
		if out, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err != nil {
			b.Skip("not in a git checkout: ", err)
		} else if len(out) == 0 {
			base = "HEAD~1"
		}
	}
	dir := b.TempDir()
	archive := exec.Command("sh", "-c", `cd "$(git rev-parse --show-toplevel)" && git archive "$0" | tar -x -C "$1"`, base, dir)
	if out, err := archive.CombinedOutput(); err != nil {
		b.Fatalf("git archive %s: %v: %s", base, err, out)
	}
	size, plain, secure, caFile := bigObjectNginx(b)
	builds := []struct {
		name string
		p    intentsProxy
	}{
		{"base", startIntentsProxy(b, buildIntents(b, dir), plain, secure)},
		{"tree", startIntentsProxy(b, buildIntents(b, "."), plain, secure)},
	}
	cpus := make(map[string]time.Duration)
	b.ResetTimer()
	for range b.N {
		// Both orders each iteration (base, tree, tree, base): what the
		// first of two meets (a cold cache, the other's late work) falls
		// on both alike.
		for _, j := range []int{0, 1, 1, 0} {
			p := builds[j]
			for _, w := range []relayWay{
				{"http", "http://" + plain + "/big", p.p.http, p.p.pid},
				{"connect", "https://" + secure + "/big", p.p.http, p.p.pid},
				{"socks5", "https://" + secure + "/big", p.p.socks, p.p.pid},
			} {
				cpus[p.name+"-"+w.name] += w.download(b, caFile, size)
			}
		}
	}
	b.StopTimer()
	gb := 2 * float64(size) * float64(b.N) / 1e9
	for _, way := range []string{"http", "connect", "socks5"} {
		for _, p := range builds {
			b.ReportMetric(cpus[p.name+"-"+way].Seconds()/gb, way+"-"+p.name+"-cpu-s/GB")
		}
		b.ReportMetric(cpus["tree-"+way].Seconds()/cpus["base-"+way].Seconds(), way+"-cpu-tree/base")
	}
}

// buildIntents builds the intents command of the module at dir without
// the race detector, as its users run it: the binary's path.
func buildIntents(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "intents")
	build := exec.Command("go", "build", "-o", bin, "./cmd/intents")
	build.Dir = dir
	if dir == "." {
		build.Dir = ".." // the module's root, from the package's folder
	}
	build.Env = append(os.Environ(), "GOFLAGS=")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// intentsProxy is an intents proxy process: its proxy URLs, HTTP and SOCKS5.
type intentsProxy struct {
	http, socks string
	pid         int
}

// startIntentsProxy runs bin's proxy on loopback, allowed to reach the
// loopback origin at plain and secure.
func startIntentsProxy(t testing.TB, bin, plain, secure string) intentsProxy {
	t.Helper()
	httpAddr, socksAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
	ports := strconv.Itoa(loopbackPort(plain)) + "," + strconv.Itoa(loopbackPort(secure))
	cmd := exec.Command(bin, "proxy", "-listen", httpAddr, "-socks", socksAddr,
		"-allow-local", "-ports", ports, "-knowledge", "")
	testbed.StartDaemon(t, cmd, func() error {
		if err := accepting(httpAddr)(); err != nil {
			return err
		}
		return accepting(socksAddr)()
	}, os.Interrupt)
	return intentsProxy{"http://" + httpAddr, "socks5h://" + socksAddr, cmd.Process.Pid}
}

// relayWay is a download from url through the proxy at proxy, whose
// process is pid.
type relayWay struct {
	name, url, proxy string
	pid              int
}

// download fetches w's url with curl (HTTP/1.1), checks that size bytes
// arrived, and returns the proxy process's CPU time over the download.
func (w relayWay) download(t testing.TB, caFile string, size int64) time.Duration {
	t.Helper()
	c0 := processCPU(t, w.pid)
	out, err := exec.Command("curl", "-sS", "--fail", "--http1.1", "-o", "/dev/null", "--cacert", caFile,
		"-w", "%{size_download}", "-x", w.proxy, w.url).Output()
	require.NoError(t, err, w.name)
	used := processCPU(t, w.pid) - c0
	got, _ := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	require.Equal(t, size, got, "%s: bytes relayed", w.name)
	return used
}
