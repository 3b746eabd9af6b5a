package proxy

// The proxy on the two-path testbed, with real clients: curl in the
// client namespace through the proxy (the child half, which runs the
// proxy there too), nginx in the server namespace, whose access log tells
// the path of every request and tunnel by the client address it came
// from (path 1: 10.71.1.1, path 2: 10.71.2.1).

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
	"github.com/sockintents/intents/policy"
)

const (
	netnsObject = 100_000   // obj
	netnsBig    = 4_000_000 // big
)

var pathAddr = map[string]string{"p1": "10.71.1.1", "p2": "10.71.2.1"}

func TestNetnsProxy(t *testing.T) {
	testbed.RequireRoot(t)
	for _, bin := range []string{"nginx", "curl"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s (apt-get install %s; .ci/run installs it)", bin, bin)
		}
	}
	tb := testbed.New(t, testbed.Spec{Paths: []testbed.PathSpec{testbed.Symmetric(10*time.Millisecond, 40e6), testbed.Symmetric(10*time.Millisecond, 40e6)}, Servers: 1})
	dir := t.TempDir()
	ca, err := testbed.NewCA(tb.Hosts[0])
	require.NoError(t, err)
	www := filepath.Join(dir, "www")
	require.NoError(t, os.MkdirAll(www, 0o755))
	for name, size := range map[string]int64{"obj": netnsObject, "big": netnsBig} {
		f, err := os.Create(filepath.Join(www, name))
		require.NoError(t, err)
		_, err = io.Copy(f, io.LimitReader(testbed.NewObject(size), size))
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	testbed.StartNginx(t, tb, dir, tb.Hosts[0], ca)
	host := tb.Hosts[0].String()
	p1 := tb.Paths[0]
	// The kernel's own IPv6 traffic on path 1 (router solicitations, 48
	// bytes each, seconds apart) is not the proxy's: this test counts the
	// link's bytes, and needs no IPv6.
	require.NoError(t, tb.Client.Sysctl("net/ipv6/conf/"+p1.ClientDev+"/disable_ipv6", "1"))
	require.NoError(t, tb.Server.Sysctl("net/ipv6/conf/"+p1.ServerDev+"/disable_ipv6", "1"))
	linkBytes := func() int64 { return p1.Up.Stats().Bytes + p1.Down.Stats().Bytes }

	// Nothing leaves on a path a rule or a listener prohibits: not a byte
	// on path 1's link, either way, while 4 MB come over plain HTTP and a
	// tunnel. First, on the fresh testbed: no earlier connection on path 1
	// is still being closed.
	for _, by := range []string{"prohibit-rule", "prohibit-listener"} {
		t.Run(by, func(t *testing.T) {
			before := linkBytes()
			testbed.RunTest(t, tb.Client, "TestNetnsProxyChild", by+" "+dir+" "+host)
			assert.Zero(t, linkBytes()-before, "bytes on path 1's link")
			for _, l := range append(nginxLog(t, dir)[by+"-http"], nginxLog(t, dir)[by+"-tls"]...) {
				assert.Equal(t, pathAddr["p2"], l.client)
			}
		})
	}
	// Each request's id names the path it must come from.
	t.Run("route", func(t *testing.T) {
		testbed.RunTest(t, tb.Client, "TestNetnsProxyChild", "route "+dir+" "+host)
		seen := nginxLog(t, dir)
		for _, id := range []string{"header-p1", "header-p2", "listener-p2", "tls1-p2", "tls2-p2", "socks-p1", "socks-p2", "httpsproxy-p2", "httpsproxy-tls-p2"} {
			require.NotEmpty(t, seen[id], "%s reached nginx", id)
			want := pathAddr[id[len(id)-2:]]
			for _, l := range seen[id] {
				assert.Equal(t, want, l.client, "%s came from %s", id, l.client)
			}
		}
		assert.Equal(t, "HTTP/1.1", seen["tls1-p2"][0].proto, "HTTP/1.1 in the tunnel")
		assert.Equal(t, "HTTP/2.0", seen["tls2-p2"][0].proto, "HTTP/2 in the tunnel")
	})
	// Programs that know nothing of a proxy, their connections redirected
	// to the transparent listener: placed on the path its intents require.
	t.Run("transparent", func(t *testing.T) {
		if _, err := exec.LookPath("nft"); err != nil {
			t.Skip("needs nft (apt-get install nftables; .ci/run installs it)")
		}
		testbed.RunTest(t, tb.Client, "TestNetnsProxyChild", "transparent "+dir+" "+host)
		seen := nginxLog(t, dir)
		for _, id := range []string{"transparent-http-p2", "transparent-tls-p2"} {
			require.NotEmpty(t, seen[id], "%s reached nginx", id)
			for _, l := range seen[id] {
				assert.Equal(t, pathAddr["p2"], l.client, "%s came from %s", id, l.client)
			}
		}
	})
	// Path 1 goes down 1 MB into a 4 MB download: over plain HTTP the
	// Transport asks for the rest on path 2 and the client gets every
	// byte; a tunnel on path 1 is reset (TCP: nothing can carry it on).
	t.Run("path-down", func(t *testing.T) {
		before := p1.Down.Stats().Bytes
		p1.Down.OnBytes(p1.Down.Stats().Bytes+1_000_000, func() { tb.SetLinkUp(p1, false) })
		testbed.RunTest(t, tb.Client, "TestNetnsProxyChild", "path-down-http "+dir+" "+host)
		require.NoError(t, tb.SetLinkUp(p1, true))
		// The request on path 1 is not logged: nginx still waits to send
		// it the rest.
		assert.GreaterOrEqual(t, p1.Down.Stats().Bytes-before, int64(1_000_000), "path 1 carried the first MB")
		assert.Contains(t, nginxLog(t, dir)["path-down-http"], logLine{pathAddr["p2"], "HTTP/1.1", "206"}, "the rest, by range, on path 2")

		p1.Down.OnBytes(p1.Down.Stats().Bytes+1_000_000, func() { tb.SetLinkUp(p1, false) })
		testbed.RunTest(t, tb.Client, "TestNetnsProxyChild", "path-down-tunnel "+dir+" "+host)
		require.NoError(t, tb.SetLinkUp(p1, true))
	})
}

// An MPTCP tunnel (its listener's intents say multipath=handover) goes on
// over path 2 when path 1 goes down 1 MB into a 4 MB download: the client
// gets every byte. The server is the testbed's Go web server, which
// listens with MPTCP (nginx does not).
func TestNetnsProxyMPTCP(t *testing.T) {
	testbed.RequireRoot(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl (apt-get install curl; .ci/run installs it)")
	}
	tb := testbed.New(t, testbed.Spec{Paths: []testbed.PathSpec{testbed.Symmetric(10*time.Millisecond, 40e6), testbed.Symmetric(10*time.Millisecond, 40e6)},
		MPTCP: &testbed.MPTCPSpec{}})
	web, err := tb.StartWeb(testbed.WebOptions{})
	require.NoError(t, err)
	dir := t.TempDir()
	_, err = web.CA.WritePEM(dir)
	require.NoError(t, err)
	p1 := tb.Paths[0]
	p1.Down.OnBytes(p1.Down.Stats().Bytes+1_000_000, func() { tb.SetLinkUp(p1, false) })
	testbed.RunTest(t, tb.Client, "TestNetnsProxyChild", "mptcp-tunnel "+dir+" "+tb.Hosts[0].String())
	require.NoError(t, tb.SetLinkUp(p1, true))
	var mptcp, tls int
	for _, c := range web.Conns() {
		if c.TLS {
			tls++
		}
	}
	for _, r := range web.Requests() {
		if strings.Contains(r.URI, "mptcp-tunnel") {
			mptcp++
		}
	}
	assert.Equal(t, 1, tls, "one tunnel, one TLS connection")
	assert.Equal(t, 1, mptcp, "one request: not asked for again")
}

type logLine struct{ client, proto, status string }

// nginxLog reads nginx's access log: the lines by request id.
func nginxLog(t *testing.T, dir string) map[string][]logLine {
	f, err := os.Open(filepath.Join(dir, "access.log"))
	require.NoError(t, err)
	defer f.Close()
	seen := map[string][]logLine{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// remote server connection requests protocol status uri
		fs := strings.Fields(sc.Text())
		if len(fs) != 7 {
			continue
		}
		if _, id, ok := strings.Cut(fs[6], "id="); ok {
			seen[id] = append(seen[id], logLine{fs[0], fs[4], fs[5]})
		}
	}
	require.NoError(t, sc.Err())
	return seen
}

// TestNetnsProxyChild runs a proxy and curl in the client namespace.
func TestNetnsProxyChild(t *testing.T) {
	f := strings.Fields(testbed.ChildArg(t, "TestNetnsProxy"))
	require.Len(t, f, 3)
	kase, dir, host := f[0], f[1], f[2]
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}}, Policy: &policy.EAF{},
		MPTCPEndpoints: kase == "mptcp-tunnel"})
	require.NoError(t, err)
	defer m.Close()
	// Not raced: the cases check where the policy places a first request.
	s := &Server{Transport: &intents.Transport{Manager: m, DisableFirstRace: true}, Dialer: &intents.Dialer{Manager: m}, PathHeader: "Intents-Path"}
	defer s.Transport.CloseIdleConnections()
	listen := func(in string, socks, tlsProxy bool) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		li, err := intents.ParseIntents(in)
		require.NoError(t, err)
		serve := s.Serve
		if socks {
			serve = s.ServeSOCKS
		}
		if tlsProxy {
			// nginx's certificate, which is for 127.0.0.1 too.
			cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key"))
			require.NoError(t, err)
			serve = func(l net.Listener, in intents.Intents) error {
				return s.ServeTLS(l, &tls.Config{Certificates: []tls.Certificate{cert}}, in)
			}
		}
		done := make(chan error, 1)
		go func() { done <- serve(l, li) }()
		t.Cleanup(func() { assert.ErrorIs(t, <-done, ErrServerClosed) })
		return l.Addr().String()
	}
	defer s.Close()
	ca := filepath.Join(dir, "ca.pem")
	obj := "http://" + host + "/obj?id="
	big := "http://" + host + "/big?id="
	tlsBig := "https://" + host + "/big?id="

	switch kase {
	case "route":
		plain := listen("", false, false)
		p2 := listen("require=p2", false, false)
		socks1 := listen("require=p1", true, false)
		socks2 := listen("require=p2", true, false)
		curlObject(t, netnsObject, "-x", plain, "-H", "Intents: require=p1", obj+"header-p1")
		out, err := exec.Command("curl", "-sS", "-o", "/dev/null", "-D", "-", "-x", plain, "-H", "Intents: require=p2", obj+"header-p2").Output()
		require.NoError(t, err)
		assert.Contains(t, string(out), "Intents-Path: p2\r\n", "the path, as the proxy tells it")
		curlObject(t, netnsObject, "-x", plain, "-H", "Intents: require=p2", obj+"header-p2")
		curlObject(t, netnsObject, "-x", p2, obj+"listener-p2")
		curlObject(t, netnsObject, "-x", p2, "--cacert", ca, "--http1.1", "https://"+host+"/obj?id=tls1-p2")
		curlObject(t, netnsObject, "-x", p2, "--cacert", ca, "--http2", "https://"+host+"/obj?id=tls2-p2")
		curlObject(t, netnsObject, "--socks5-hostname", socks1, obj+"socks-p1")
		curlObject(t, netnsObject, "--socks5-hostname", socks2, obj+"socks-p2")
		// curl through the proxy's HTTPS listener (HTTP/1.1 over TLS to
		// it: this curl has no HTTP/2 to a proxy).
		https2 := "https://" + listen("require=p2", false, true)
		curlObject(t, netnsObject, "-x", https2, "--proxy-cacert", ca, obj+"httpsproxy-p2")
		curlObject(t, netnsObject, "-x", https2, "--proxy-cacert", ca, "--cacert", ca, "https://"+host+"/obj?id=httpsproxy-tls-p2")
	case "prohibit-rule":
		rules, err := ParseRules(strings.NewReader(host + "/32 prohibit=p1\n"))
		require.NoError(t, err)
		s.Rules = rules
		plain := listen("", false, false)
		curlObject(t, netnsBig, "-x", plain, "-H", "Intents: require=p1", big+kase+"-http")
		curlObject(t, netnsBig, "-x", plain, "--cacert", ca, tlsBig+kase+"-tls")
	case "prohibit-listener":
		plain := listen("prohibit=p1", false, false)
		curlObject(t, netnsBig, "-x", plain, "-H", "Intents: require=p1", big+kase+"-http")
		curlObject(t, netnsBig, "-x", plain, "--cacert", ca, tlsBig+kase+"-tls")
	case "path-down-http":
		plain := listen("prefer=p1", false, false)
		curlObject(t, netnsBig, "-x", plain, big+kase)
	case "path-down-tunnel":
		plain := listen("prefer=p1", false, false)
		start := time.Now()
		out, err := exec.Command("curl", "-sS", "-o", "/dev/null", "--max-time", "60", "-x", plain, "--cacert", ca, tlsBig+kase).CombinedOutput()
		require.Error(t, err, "a TCP tunnel does not survive its path")
		t.Logf("the tunnel's client saw %q after %v (its path went down 1 MB in)", strings.TrimSpace(string(out)), time.Since(start).Round(time.Millisecond))
		assert.NotContains(t, string(out), "timed out", "reset, not left to time out")
	case "transparent":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			done <- s.ServeTransparent(l, intents.Intents{Interfaces: map[string]intents.Level{"p2": intents.LevelRequire}})
		}()
		t.Cleanup(func() { assert.ErrorIs(t, <-done, ErrServerClosed) })
		// In this namespace only, the connections that programs run as
		// nobody (curl, here) make to the server are redirected to the
		// listener; the proxy's own, as root, go out as they are.
		_, port, _ := net.SplitHostPort(l.Addr().String())
		nft := func(args ...string) {
			out, err := exec.Command("nft", args...).CombinedOutput()
			require.NoError(t, err, "nft %v: %s", args, out)
		}
		nft("add", "table", "ip", "intents_test")
		t.Cleanup(func() { exec.Command("nft", "delete", "table", "ip", "intents_test").Run() })
		nft("add", "chain", "ip", "intents_test", "out", "{ type nat hook output priority -100; }")
		nft("add", "rule", "ip", "intents_test", "out", "meta", "skuid", "65534", "ip", "daddr", host, "tcp", "dport", "{ 80, 443 }", "redirect", "to", ":"+port)
		asNobody := func(args ...string) {
			cmd := exec.Command("curl", append([]string{"-sS", "--fail", "--max-time", "60", "-o", "/dev/null", "--noproxy", "*"}, args...)...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "curl %v: %s", args, out)
		}
		pem, err := os.ReadFile(ca)
		require.NoError(t, err)
		public, err := os.CreateTemp("", "ca*.pem") // curl as nobody reads it
		require.NoError(t, err)
		defer os.Remove(public.Name())
		_, err = public.Write(pem)
		require.NoError(t, err)
		require.NoError(t, public.Close())
		require.NoError(t, os.Chmod(public.Name(), 0o644))
		asNobody(obj + "transparent-http-p2")
		asNobody("--cacert", public.Name(), "https://"+host+"/obj?id=transparent-tls-p2")
	case "mptcp-tunnel":
		require.NoError(t, m.MPTCPError(), "the Manager's MPTCP endpoints")
		plain := listen("prefer=p1,multipath=handover", false, false)
		start := time.Now()
		curlObject(t, netnsBig, "-x", plain, "--cacert", ca, "https://"+host+"/obj/4000000?id="+kase)
		t.Logf("the MPTCP tunnel carried 4 MB in %v, path 1 going down 1 MB in", time.Since(start).Round(time.Millisecond))
	default:
		t.Fatalf("unknown case %q", kase)
	}
}

// curlObject runs curl with args and checks that it got the size bytes
// of testbed.NewObject.
func curlObject(t *testing.T, size int64, args ...string) {
	t.Helper()
	cmd := exec.Command("curl", append([]string{"-sS", "--fail", "--max-time", "60", "-o", "-"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "curl %s: %s", strings.Join(args, " "), stderr.String())
	want := sha256.New()
	io.Copy(want, io.LimitReader(testbed.NewObject(size), size))
	assert.Equal(t, fmt.Sprintf("%x", want.Sum(nil)), fmt.Sprintf("%x", sha256.Sum256(out)), "curl %s: the exact bytes", strings.Join(args, " "))
}
