package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/pageload"
	"github.com/sockintents/intents/internal/testbed"
)

func requireChromium(t *testing.T) {
	t.Helper()
	testbed.RequireRoot(t)
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Skip("needs chromium (apt-get install chromium; .ci/run installs it)")
	}
}

// browserTestbed is a testbed of two 40 Mbit/s, 10 ms paths and three
// servers, serving pages as a Site, with an isolated namespace for the
// browser: the config a client needs for browser contenders.
// Each request's times are in the returned log.
func browserTestbed(t *testing.T, pages ...pageload.Workload) (*testbed.Testbed, *testbed.WebServer, config, *timeLog) {
	tb := testbed.New(t, testbed.Spec{Servers: 3, MPTCP: &testbed.MPTCPSpec{},
		Paths: []testbed.PathSpec{testbed.Symmetric(10*time.Millisecond, 40e6), testbed.Symmetric(10*time.Millisecond, 40e6)}})
	web, err := tb.StartWeb(testbed.WebOptions{})
	require.NoError(t, err)
	times := &timeLog{h: &pageload.Site{Pages: pages, Host: serverHost}, at: map[string][2]time.Time{}}
	web.HandlePath(pageload.SitePrefix, times)
	iso, err := tb.AddIsolated()
	require.NoError(t, err)
	spki, err := spkiHash(web.CA.Cert.Certificate[0])
	require.NoError(t, err)
	return tb, web, config{Workloads: pages, Browser: browserSetup{Netns: iso.Name, Addr: iso.Addr, Gateway: iso.Gateway, SPKI: spki}}, times
}

// timeLog serves with h and keeps when each request (by URI) arrived
// and when its response was written.
type timeLog struct {
	h  http.Handler
	mu sync.Mutex
	at map[string][2]time.Time
}

func (l *timeLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	l.h.ServeHTTP(w, r)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at[r.URL.RequestURI()] = [2]time.Time{start, time.Now()}
}

func (l *timeLog) times(uri string) [2]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.at[uri]
}

// waitingPage has objects of every type on three hosts, some waiting for
// two others: a quick script (2) whose child (3) also waits for a large
// image (1), and an image (3) that is a parent, so served as a script.
var waitingPage = pageload.Workload{Name: "waiting", Objects: []pageload.Object{
	{Size: 10_000},
	{Host: 1, Size: 300_000, Deps: []int{0}, Type: pageload.TypeImage},
	{Size: 1_000, Deps: []int{0}, Type: pageload.TypeScript},
	{Host: 2, Size: 5_000, Deps: []int{1, 2}, Type: pageload.TypeImage},
	{Host: 1, Size: 2_000, Deps: []int{0}, Type: pageload.TypeStylesheet},
	{Host: 2, Size: 20_000, Deps: []int{3}, Type: pageload.TypeScript},
	{Size: 10_000, Deps: []int{4, 5}},
}}

// TestNetnsBrowser loads a page of three hosts whose objects wait for
// others (waitingPage) with each browser contender, Chromium in its isolated namespace and the proxy in the
// client namespace. The servers' log must show every object once, over
// plain HTTP each with the proxy's Via and over HTTPS as HTTP/2, and,
// where a path was required, from that path; round robin uses both. No
// object is asked for before every object it waits for was answered.
func TestNetnsBrowser(t *testing.T) {
	requireChromium(t)
	tb, web, cfg, times := browserTestbed(t, waitingPage)
	for _, key := range []string{"browser-path1", "browser-path2", "browser-twin", "browser-rr", "browser-eaf",
		"browser-h2-path1", "browser-h2-path2", "browser-h2-rr", "browser-h2-eaf",
		"browser-tls-path1", "browser-tls-path2", "browser-tls-eaf", "browser-tls-mptcp"} {
		t.Run(key, func(t *testing.T) {
			cfg := cfg
			cfg.Contenders = []string{key}
			arg, err := json.Marshal(cfg)
			require.NoError(t, err)
			testbed.RunTest(t, tb.Client, "TestNetnsBrowserChild", string(arg))
			recs := []record{{Contender: key, Load: key}}
			browserLoads(recs, web.Requests())
			assert.Empty(t, recs[0].Failed)
			var seen []string
			for _, r := range web.Requests() {
				if !strings.Contains(r.URI, "load="+key) || strings.Contains(r.URI, key+"x") {
					continue
				}
				seen = append(seen, strings.SplitN(r.URI, "?", 2)[0])
				switch {
				case strings.HasPrefix(key, "browser-tls-"):
					assert.Equal(t, "HTTP/2.0", r.Proto, r.URI)
				case strings.HasPrefix(key, "browser-h2-"):
					assert.Equal(t, "2 intents-proxy", r.Via, "%s came to the proxy over HTTP/2", r.URI)
				default:
					assert.Equal(t, "1.1 intents-proxy", r.Via, "%s came through the proxy", r.URI)
				}
			}
			var want []string
			for i := range waitingPage.Objects {
				want = append(want, fmt.Sprintf("/site/0/%d", i))
			}
			assert.ElementsMatch(t, want, seen, "every object once")
			for j, o := range waitingPage.Objects {
				asked := times.times(fmt.Sprintf("/site/0/%d?load=%s", j, key))[0]
				for _, d := range o.Deps {
					answered := times.times(fmt.Sprintf("/site/0/%d?load=%s", d, key))[1]
					assert.True(t, asked.After(answered), "object %d asked for %v after object %d, its dependency, was answered", j, asked.Sub(answered), d)
				}
			}
			switch {
			case strings.HasSuffix(key, "path1"), key == "browser-twin":
				assert.Equal(t, map[string]int{"p1": len(want)}, recs[0].Paths)
			case strings.HasSuffix(key, "path2"):
				assert.Equal(t, map[string]int{"p2": len(want)}, recs[0].Paths)
			case strings.HasSuffix(key, "-rr"):
				assert.Len(t, recs[0].Paths, 2, "both paths: %v", recs[0].Paths)
			}
		})
	}
}

// TestNetnsBrowserChild loads the page once with its contender, tagged
// with the contender's key.
func TestNetnsBrowserChild(t *testing.T) {
	var cfg config
	require.NoError(t, json.Unmarshal([]byte(testbed.ChildArg(t, "TestNetnsBrowser")), &cfg))
	c := newContender(cfg.Contenders[0], cfg)
	defer func() {
		c.close()
		c.rt.(interface{ Close() error }).Close()
		c.m.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := browserLoad(ctx, c, &pageload.Site{Pages: cfg.Workloads, Host: serverHost}, 0, c.key)
	require.NoError(t, err)
	assert.Positive(t, res.PLT)
	t.Logf("the page loaded in %v by the browser's clock", res.PLT.Round(time.Millisecond))
}

// TestNetnsBrowserHasNoRouteButTheProxy loads a page with no proxy set
// in the browser's isolated namespace: the load fails and no request
// reaches a server. With a proxy, the same browser loads it.
func TestNetnsBrowserHasNoRouteButTheProxy(t *testing.T) {
	requireChromium(t)
	tb, web, cfg, _ := browserTestbed(t, pageload.Uniform(2, 1000, 1))
	arg, err := json.Marshal(cfg)
	require.NoError(t, err)
	testbed.RunTest(t, tb.Client, "TestNetnsBrowserHasNoRouteButTheProxyChild", string(arg))
	for _, r := range web.Requests() {
		assert.NotContains(t, r.URI, "load=direct", "a request went around the proxy")
	}
}

func TestNetnsBrowserHasNoRouteButTheProxyChild(t *testing.T) {
	var cfg config
	require.NoError(t, json.Unmarshal([]byte(testbed.ChildArg(t, "TestNetnsBrowserHasNoRouteButTheProxy")), &cfg))
	site := &pageload.Site{Pages: cfg.Workloads, Host: serverHost}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := browser{Netns: cfg.Browser.Netns}
	_, err := b.load(ctx, site.URL("http", 0, 0, "direct"))
	require.Error(t, err, "a browser with no proxy reached the server")
	t.Logf("without the proxy: %v", err)
	c := newContender("browser-eaf", cfg)
	defer func() {
		c.close()
		c.rt.(interface{ Close() error }).Close()
		c.m.Close()
	}()
	res, err := browserLoad(ctx, c, site, 0, "proxied")
	require.NoError(t, err)
	assert.Positive(t, res.PLT)
}

// TestBrowserRule: a browser contender is set against the browser's own
// single paths over its protocol, never net/http's; it is slower only
// where its median's interval lies wholly above 1.05 × the better path's;
// the goal speaks of the time it saves.
func TestBrowserRule(t *testing.T) {
	scens, err := parseScenarios("symmetric", testTraces)
	require.NoError(t, err)
	w := pageload.Uniform(32, 100_000, 1)
	keys := []string{"path1", "path2", "browser-path1", "browser-path2", "browser-twin", "browser-eaf",
		"browser-h2-path1", "browser-h2-path2", "browser-h2-eaf", "browser-tls-path1", "browser-tls-path2", "browser-tls-eaf"}
	loads := map[string]map[string][]time.Duration{scens[0].Name: {
		"path1": msOf(100, 100, 100), "path2": msOf(100, 100, 100), // net/http's: not the browser's baselines
		"browser-path1": msOf(4000, 4100, 4200), "browser-path2": msOf(5000, 5000, 5000),
		"browser-twin": msOf(3900, 4200, 4300), "browser-eaf": msOf(2900, 3000, 3100),
		"browser-tls-path1": msOf(4000, 4000, 4000), "browser-tls-path2": msOf(5000, 5000, 5000),
		"browser-tls-eaf":  msOf(4400, 4400, 4500),
		"browser-h2-path1": msOf(3000, 3000, 3000), "browser-h2-path2": msOf(5000, 5000, 5000),
		"browser-h2-eaf": msOf(2500, 2500, 2600),
	}}
	res := newResults(scens, []pageload.Workload{w}, keys, recordsOf(loads, w))
	cells := res.browserTests()
	require.Len(t, cells, 4, "the twin, EAF over HTTP (to the proxy: HTTP/1.1 and HTTP/2), EAF over HTTPS")
	byKey := map[string]browserCell{}
	for _, c := range cells {
		byKey[c.contender] = c
	}
	assert.Equal(t, "browser-path1", byKey["browser-eaf"].better)
	assert.InDelta(t, 3000.0/4100, byKey["browser-eaf"].ratio, 1e-9)
	assert.InDelta(t, 1-3000.0/4100, byKey["browser-eaf"].faster(), 1e-9)
	assert.False(t, byKey["browser-eaf"].slower())
	assert.False(t, byKey["browser-twin"].slower(), "a twin's interval reaches below 1.05")
	assert.Equal(t, "browser-h2-path1", byKey["browser-h2-eaf"].better)
	assert.InDelta(t, 2500.0/3000, byKey["browser-h2-eaf"].ratio, 1e-9)
	assert.Equal(t, "browser-tls-path1", byKey["browser-tls-eaf"].better)
	assert.True(t, byKey["browser-tls-eaf"].slower(), "1.10 × every time")
	assert.Equal(t, cells, res.browserTests(), "the same loads, the same report")

	var out strings.Builder
	res.printBrowser(&out)
	assert.Contains(t, out.String(), "goal, symmetric 32×100KB: EAF (Chromium via the proxy) at least 25 % faster than the better path: +27 %")
	assert.Contains(t, out.String(), ": met")
	assert.Contains(t, out.String(), "EAF (Chromium, HTTPS tunnels): slower in 1 of 1 cells")
	assert.Contains(t, out.String(), "goal, symmetric 32×100KB: EAF (Chromium via the proxy, HTTP/2) at least 25 % faster than the better path: +17 %")
	assert.Contains(t, out.String(), ": not met")
	assert.Len(t, res.browserRows(), 5, "a header and a row per cell tested")
}
