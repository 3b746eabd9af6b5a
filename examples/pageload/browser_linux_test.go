package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
	"github.com/sockintents/intents/policy"
	"github.com/sockintents/intents/proxy"
)

// browserPage is the smoke test's page: a root and eight images of
// 20 kB, each found by the browser as it parses the root.
const browserPage = "/page/8x20000"

// TestNetnsBrowser loads a page in headless Chromium through the proxy,
// in the client namespace, with the proxy's listener requiring path 1,
// then path 2, then leaving the choice to EAF. The web server's log must
// show the root and its eight objects, each through the proxy (its Via:
// a browser that went around the proxy fails the test) and, where a path
// was required, from that path's address.
func TestNetnsBrowser(t *testing.T) {
	testbed.RequireRoot(t)
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Skip("needs chromium (apt-get install chromium; .ci/run installs it)")
	}
	tb := testbed.New(t, testbed.Spec{Paths: []testbed.PathSpec{testbed.Symmetric(10*time.Millisecond, 40e6), testbed.Symmetric(10*time.Millisecond, 40e6)}})
	web, err := tb.StartWeb(testbed.WebOptions{})
	require.NoError(t, err)
	for _, kase := range []string{"require=p1", "require=p2", "eaf"} {
		t.Run(kase, func(t *testing.T) {
			before := len(web.Requests())
			testbed.RunTest(t, tb.Client, "TestNetnsBrowserChild", kase)
			seen := web.Requests()[before:]
			var objects int
			for _, r := range seen {
				assert.Contains(t, r.Via, "intents-proxy", "%s came through the proxy", r.URI)
				switch kase {
				case "require=p1":
					assert.Equal(t, "10.71.1.1", r.Remote.Addr().String(), r.URI)
				case "require=p2":
					assert.Equal(t, "10.71.2.1", r.Remote.Addr().String(), r.URI)
				}
				if strings.HasPrefix(r.URI, "/obj/20000") {
					objects++
				}
			}
			assert.Equal(t, 8, objects, "the page's objects")
		})
	}
}

func TestNetnsBrowserChild(t *testing.T) {
	kase := testbed.ChildArg(t, "TestNetnsBrowser")
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}}, Policy: &policy.EAF{}, NoWatch: true})
	require.NoError(t, err)
	defer m.Close()
	var in intents.Intents
	if kase != "eaf" {
		in, err = intents.ParseIntents(kase)
		require.NoError(t, err)
	}
	s := &proxy.Server{Transport: &intents.Transport{Manager: m}, Dialer: &intents.Dialer{Manager: m}}
	defer s.Transport.CloseIdleConnections()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- s.Serve(l, in) }()
	defer func() {
		s.Close()
		assert.ErrorIs(t, <-served, proxy.ErrServerClosed)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	plt, err := browserLoad(ctx, l.Addr().String(), "http://10.71.100.1"+browserPage)
	require.NoError(t, err)
	assert.Positive(t, plt)
	t.Logf("%s: the page loaded in %v by the browser's clock", kase, plt.Round(time.Millisecond))
}

// browserLoad loads url in a new headless Chromium whose only way to the
// servers is the proxy at proxyAddr: a fresh profile (no cache, no
// cookies) each time, as a first visit. It returns the page's load time
// by the browser's own clock (Navigation Timing: loadEventEnd −
// navigationStart). Chromium runs without its sandbox: the page loader
// runs as root in its namespace, where the sandbox cannot start.
func browserLoad(ctx context.Context, proxyAddr, url string) (time.Duration, error) {
	profile, err := os.MkdirTemp("", "intents-browser-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(profile)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.NoSandbox,
		chromedp.UserDataDir(profile),
		chromedp.ProxyServer("http://"+proxyAddr),
		// Nothing bypasses the proxy, loopback included.
		chromedp.Flag("proxy-bypass-list", "<-loopback>"),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disk-cache-size", "1"),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(bctx, chromedp.Navigate(url)); err != nil {
		return 0, fmt.Errorf("browser: %s: %w", url, err)
	}
	// Navigate returns at the load event; loadEventEnd is set once its
	// handlers have run.
	ms, err := chromedp.Run(bctx, chromedp.Poll[float64](
		`performance.timing.loadEventEnd > 0 && performance.timing.loadEventEnd - performance.timing.navigationStart`,
		chromedp.WithPollingInterval(5*time.Millisecond)))
	if err != nil {
		return 0, fmt.Errorf("browser: %s: %w", url, err)
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}
