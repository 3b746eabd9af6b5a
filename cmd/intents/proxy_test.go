package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	xproxy "golang.org/x/net/proxy"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
)

// intents proxy serves until its context ends, on the listeners asked
// for, and a request through it reaches its destination.
func TestProxyCommand(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "via "+r.Header.Get("Via"))
	}))
	defer upstream.Close()
	rules := filepath.Join(t.TempDir(), "rules")
	require.NoError(t, os.WriteFile(rules, []byte("127.0.0.0/8 category=query\n"), 0o644))

	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var logged strings.Builder
	code := make(chan int, 1)
	var knowledge string
	loop := loopManager(t, "")
	mf := func(cfg intents.Config) (*intents.Manager, error) {
		knowledge = cfg.Knowledge
		return loop(cfg)
	}
	go func() {
		code <- run(ctx, []string{"proxy", "-listen", "127.0.0.1:0=category=bulk", "-socks", "127.0.0.1:0", "-metrics", "127.0.0.1:0",
			"-rules", rules, "-pac", "*.example=127.0.0.1:8081", "-v",
			"-allow-local", "-ports", "any"}, io.Discard, pw, mf)
		pw.Close()
	}()
	// The log says where each listener is: HTTP, SOCKS5, metrics, in order.
	var addrs []string
	listening := regexp.MustCompile(`proxy: listening" addr=(\S+)`)
	sc := bufio.NewScanner(pr)
	for len(addrs) < 3 && sc.Scan() {
		if m := listening.FindStringSubmatch(sc.Text()); m != nil {
			addrs = append(addrs, m[1])
		}
	}
	require.Len(t, addrs, 3, "the listeners are logged")
	copied := make(chan struct{})
	go func() {
		io.Copy(&logged, pr)
		close(copied)
	}()

	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addrs[0]})}}
	resp, err := c.Get(upstream.URL)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.CloseIdleConnections()
	assert.Equal(t, "via 1.1 intents-proxy", string(body))

	resp, err = http.Get("http://" + addrs[0] + "/proxy.pac")
	require.NoError(t, err)
	pac, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(pac), `if (dnsDomainIs(host.toLowerCase(), ".example")) return "PROXY 127.0.0.1:8081";`)

	resp, err = http.Get("http://" + addrs[2] + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(metrics), "intents_proxy_forwarded_total 1")
	http.DefaultClient.CloseIdleConnections()

	cancel()
	assert.Equal(t, 0, <-code)
	<-copied
	assert.Regexp(t, `proxy: request" method=GET url=http://127.0.0.1:\d+/ status=200 path=system`, logged.String(), "-v logs each request with its path")
	def, err := intents.DefaultKnowledgeFile()
	require.NoError(t, err)
	assert.Equal(t, def, knowledge, "the proxy keeps what it learns of the paths by default")
}

func TestProxyCommandUsage(t *testing.T) {
	for _, args := range [][]string{
		{"proxy", "-listen", "nonsense"},
		{"proxy", "-listen", "127.0.0.1:0=category=nonsense"},
		{"proxy", "-allow", "10.0.0.0"},
		{"proxy", "-auth", "nopassword"},
		{"proxy", "-auth", "user:"},
		{"proxy", "-tunnel-idle", "soon"},
		{"proxy", "-ports", "0"},
		{"proxy", "-policy", "nonsense"},
		{"proxy", "extra"},
		{"proxy", "-pac", "*.example"},
		{"proxy", "-pac", "a b=127.0.0.1:8081"},
		{"proxy", "-tls-listen", "127.0.0.1:0", "-cert", "c.pem"},
		{"proxy", "-tls-listen", "127.0.0.1:0", "-cert-dir", ""},
		{"proxy", "-cert", "c.pem", "-key", "k.pem"},
	} {
		var stderr strings.Builder
		assert.Equal(t, 2, run(context.Background(), args, io.Discard, &stderr, loopManager(t, "")), "%v: %s", args, stderr.String())
	}
}

// -tls-listen serves HTTPS proxy clients with the certificate of -cert
// and -key: net/http through it (HTTP/1.1 over TLS to the proxy). By
// default the proxy refuses to reach its own host, however the port.
func TestProxyCommandTLS(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "via "+r.Header.Get("Via"))
	}))
	defer upstream.Close()
	ca, err := testbed.NewCA()
	require.NoError(t, err)
	chain, key, err := ca.ServerPEM()
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, chain, 0o600))
	require.NoError(t, os.WriteFile(keyFile, key, 0o600))

	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"proxy", "-tls-listen", "127.0.0.1:0", "-cert", certFile, "-key", keyFile, "-ports", "any"}, io.Discard, pw, loopManager(t, ""))
		pw.Close()
	}()
	listening := regexp.MustCompile(`proxy: listening" addr=(\S+)`)
	sc := bufio.NewScanner(pr)
	var addr string
	for addr == "" && sc.Scan() {
		if m := listening.FindStringSubmatch(sc.Text()); m != nil {
			addr = m[1]
		}
	}
	require.NotEmpty(t, addr, "the listener is logged")
	go io.Copy(io.Discard, pr)

	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "https", Host: addr}), TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}
	resp, err := (&http.Client{Transport: tr}).Get(upstream.URL)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	tr.CloseIdleConnections()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Equal(t, "intents proxy: the destination is on the proxy's own host\n", string(body))
	cancel()
	assert.Equal(t, 0, <-code)
}

// -auth USER:PASSWORD asks every client for them: HTTP clients without
// get 407, SOCKS5 clients without are refused, and with them both are
// served.
func TestProxyCommandAuth(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Empty(t, r.Header.Get("Proxy-Authorization"), "the credentials stay with the proxy")
		io.WriteString(w, "ok")
	}))
	defer upstream.Close()
	addrs := startProxyCommand(t, 2, "-listen", "127.0.0.1:0", "-socks", "127.0.0.1:0", "-auth", "ann:s3cret", "-allow-local", "-ports", "any").addrs

	get := func(proxyURL *url.URL) int {
		tr := &http.Transport{Proxy: http.ProxyURL(proxyURL)}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Get(upstream.URL)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusProxyAuthRequired, get(&url.URL{Scheme: "http", Host: addrs[0]}))
	assert.Equal(t, http.StatusProxyAuthRequired, get(&url.URL{Scheme: "http", Host: addrs[0], User: url.UserPassword("ann", "wrong")}))
	assert.Equal(t, http.StatusOK, get(&url.URL{Scheme: "http", Host: addrs[0], User: url.UserPassword("ann", "s3cret")}))

	socks := func(auth *xproxy.Auth) error {
		d, err := xproxy.SOCKS5("tcp", addrs[1], auth, xproxy.Direct)
		require.NoError(t, err)
		c, err := d.Dial("tcp", upstream.Listener.Addr().String())
		if err == nil {
			c.Close()
		}
		return err
	}
	assert.Error(t, socks(nil), "SOCKS5 without credentials")
	assert.Error(t, socks(&xproxy.Auth{User: "ann", Password: "wrong"}))
	assert.NoError(t, socks(&xproxy.Auth{User: "ann", Password: "s3cret"}))
}

// Requests that hang at some origins never hold up a request to
// another: the proxy bounds a host's connections, not all of them (the
// host's programs share one client address, and so one pool).
func TestProxyCommandHangingOriginsHoldNoOther(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 64)
	var hanging []*httptest.Server
	for range intents.DefaultMaxConns + 1 {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		hanging = append(hanging, s)
	}
	answers := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer answers.Close()

	addr, stop := startLocalProxy(t)
	proxied := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr})}
	defer proxied.CloseIdleConnections()

	hung := make(chan error, len(hanging))
	hangCtx, stopHanging := context.WithCancel(context.Background())
	for _, s := range hanging {
		go func() {
			req, _ := http.NewRequestWithContext(hangCtx, "GET", s.URL, nil)
			resp, err := proxied.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			hung <- err
		}()
	}
	for range intents.DefaultMaxConns { // a browser's limit of connections in all
		<-arrived
	}
	reqCtx, done := context.WithTimeout(context.Background(), 10*time.Second)
	defer done()
	req, _ := http.NewRequestWithContext(reqCtx, "GET", answers.URL, nil)
	resp, err := proxied.RoundTrip(req)
	require.NoError(t, err, "another origin answered while %d hang", len(hanging))
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "ok", string(body))

	stopHanging()
	close(release)
	for range hanging {
		<-hung
	}
	for _, s := range hanging {
		s.Close()
	}
	assert.Equal(t, 0, stop())
}

// An origin's response headers over 64 kB are refused (502), as squid
// refuses them: the proxy would hold such headers of every request at
// once.
func TestProxyCommandBoundsResponseHeaders(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("a", 128<<10))
		io.WriteString(w, "ok")
	}))
	defer origin.Close()
	fine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Fair", strings.Repeat("a", 32<<10))
		io.WriteString(w, "ok")
	}))
	defer fine.Close()
	addr, stop := startLocalProxy(t)
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: addr})}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(origin.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "128 kB of headers")
	resp, err = c.Get(fine.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "32 kB of headers")
	assert.Equal(t, 0, stop())
}

// startLocalProxy runs `intents proxy` on a loopback listener that may
// reach this host's servers on any port, keeping nothing, and returns
// the listener's address and how to stop it (with its exit status).
func startLocalProxy(t *testing.T) (addr string, stop func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"proxy", "-listen", "127.0.0.1:0", "-allow-local", "-ports", "any", "-knowledge", ""}, io.Discard, pw, loopManager(t, ""))
		pw.Close()
	}()
	listening := regexp.MustCompile(`proxy: listening" addr=(\S+)`)
	sc := bufio.NewScanner(pr)
	for addr == "" && sc.Scan() {
		if m := listening.FindStringSubmatch(sc.Text()); m != nil {
			addr = m[1]
		}
	}
	require.NotEmpty(t, addr, "the listener is logged")
	go io.Copy(io.Discard, pr)
	return addr, func() int {
		cancel()
		return <-code
	}
}
