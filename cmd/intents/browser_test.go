package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runningProxy is `intents proxy` run by a test: its listeners'
// addresses, in the order logged, and what it writes to stderr.
type runningProxy struct {
	addrs []string
	mu    sync.Mutex
	out   strings.Builder // stderr, after the listeners
	done  chan struct{}
	code  chan int
	stop  context.CancelFunc
}

// startProxyCommand runs `intents proxy args...` on the loopback path
// until the test ends, and waits for its n listeners.
func startProxyCommand(t *testing.T, n int, args ...string) *runningProxy {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &runningProxy{done: make(chan struct{}), code: make(chan int, 1), stop: cancel}
	pr, pw := io.Pipe()
	go func() {
		p.code <- run(ctx, append([]string{"proxy"}, args...), io.Discard, pw, loopManager(t, ""))
		pw.Close()
	}()
	listening := regexp.MustCompile(`proxy: listening" addr=(\S+)`)
	br := bufio.NewReader(pr)
	for len(p.addrs) < n {
		line, err := br.ReadString('\n')
		require.NoError(t, err, "the proxy ended before its listeners were logged")
		if m := listening.FindStringSubmatch(line); m != nil {
			p.addrs = append(p.addrs, m[1])
		}
	}
	go func() {
		defer close(p.done)
		buf := make([]byte, 4096)
		for {
			k, err := br.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:k])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		assert.Equal(t, 0, <-p.code)
		<-p.done
	})
	return p
}

// waitOutput waits until the proxy has written something that matches
// re, and returns the submatches.
func (p *runningProxy) waitOutput(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	var m []string
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		m = re.FindStringSubmatch(p.out.String())
		return m != nil
	}, 20*time.Second, 10*time.Millisecond, "the proxy never wrote %s", re)
	return m
}

var (
	spkiFlag = regexp.MustCompile(`--ignore-certificate-errors-spki-list=(\S+)`)
	caImport = regexp.MustCompile(`import (\S+) as an authority`)
)

// With -tls-listen and no certificate, the proxy makes its own on first
// use, reuses it, and prints how to start a browser through it: the key
// Chromium is told to accept is the key the proxy serves, and a client
// that trusts the printed authority reaches its origins through it.
func TestProxyCommandOwnCertificate(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	defer origin.Close()
	dir := t.TempDir()
	p := startProxyCommand(t, 1, "-tls-listen", "127.0.0.1:0", "-cert-dir", dir, "-allow-local", "-ports", "any")
	spki := p.waitOutput(t, spkiFlag)[1]
	caFile := p.waitOutput(t, caImport)[1]
	assert.Equal(t, filepath.Join(dir, "proxy-ca.pem"), caFile)

	caPEM, err := os.ReadFile(caFile)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	var served []byte
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "https", Host: p.addrs[0]}), TLSClientConfig: &tls.Config{
		RootCAs: roots,
		VerifyConnection: func(cs tls.ConnectionState) error {
			served = cs.PeerCertificates[0].RawSubjectPublicKeyInfo
			return nil
		},
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(origin.URL)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "hello", string(body))
	sum := sha256.Sum256(served)
	assert.Equal(t, base64.StdEncoding.EncodeToString(sum[:]), spki, "the key printed is the key served")
	p.stop()
	<-p.done

	again := startProxyCommand(t, 1, "-tls-listen", "127.0.0.1:0", "-cert-dir", dir)
	assert.Equal(t, spki, again.waitOutput(t, spkiFlag)[1], "the certificate is reused")
}

// The README's browser set-up, as printed, with Debian's Chromium: a page
// loads through the proxy, and the proxy's log shows its request.
func TestProxyCommandChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("needs chromium (apt-get install chromium; .ci/run installs it)")
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "<html><body><p id=m>through the proxy</p></body></html>")
	}))
	defer origin.Close()
	dir := t.TempDir()
	p := startProxyCommand(t, 1, "-tls-listen", "127.0.0.1:0", "-cert-dir", dir, "-allow-local", "-ports", "any", "-v")
	command := p.waitOutput(t, regexp.MustCompile(`(?s)\n  chromium (.*?spki-list=\S+)`))[1]
	var args []string
	for _, f := range strings.Fields(strings.ReplaceAll(command, "\\\n", " ")) {
		args = append(args, strings.ReplaceAll(f, "'", "")) // as the shell takes the quoted words
	}
	// Headless, as root without its sandbox (as CI runs it), and without
	// the browser's own background requests (which the proxy, on the
	// loopback path alone, could not place anyway).
	args = append(args, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--dump-dom", origin.URL+"/page")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, chromium, args...).Output()
	require.NoError(t, err, "%s %s", chromium, strings.Join(args, " "))
	assert.Contains(t, string(out), "through the proxy", "the page loaded")
	p.waitOutput(t, regexp.MustCompile(`proxy: request" method=GET url=`+regexp.QuoteMeta(origin.URL)+`/page status=200`))
}
