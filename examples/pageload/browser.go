//go:build linux

package main

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/sockintents/intents/internal/pageload"
	"github.com/sockintents/intents/internal/testbed"
)

// browser is how a page loader starts headless Chromium.
type browser struct {
	// Proxy is the proxy's URL (http://host:port, or https:// for one
	// the browser reaches over TLS); nothing bypasses it. Empty: no proxy.
	Proxy string
	// Netns, if set, names the namespace the browser runs in (see
	// testbed.Isolated): one whose only route leads to the proxy.
	Netns string
	// SPKI is the base64 SHA-256 of the public key of the web servers'
	// certificate (and, after a comma, the proxy's), which the browser
	// then accepts though no CA it knows signed it (Chromium's
	// --ignore-certificate-errors-spki-list: for those keys only, where
	// --ignore-certificate-errors would take any).
	SPKI string
}

// spkiHash is what browser.SPKI takes for the certificate der.
func spkiHash(der []byte) (string, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:]), nil
}

// browserResult is one page load by the browser's own clock.
type browserResult struct {
	// PLT is the page's loadEventEnd − navigationStart (Navigation
	// Timing), as the paper measures a browser's load.
	PLT time.Duration
	// Resources is how many of the site's objects the page fetched
	// (Resource Timing, each URL once), Late how many of them ended after
	// the load event: a page whose objects all count has none.
	Resources, Late int
	// Others are the URLs of the resource entries that are not another of
	// the site's objects (an object's second entry among them).
	Others []string
	// Bytes are the bodies' bytes the browser received, the page's and
	// its subresources' (of hosts that allow it: Timing-Allow-Origin).
	Bytes int64
	// Failed are the network errors of the requests that failed, with
	// their URLs ("net::ERR_… URL"), as the browser reported them.
	Failed []string
}

// load loads url in a new headless Chromium: a fresh profile (no cache,
// no cookies) each time, as a first visit, started and shown a blank page
// before the measured load so that its start-up stays out of the time.
// Chromium runs without its sandbox: the page loader runs as root in its
// namespace, where the sandbox cannot start.
func (b browser) load(ctx context.Context, url string) (browserResult, error) {
	profile, err := os.MkdirTemp("", "intents-browser-")
	if err != nil {
		return browserResult{}, err
	}
	defer os.RemoveAll(profile)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.NoSandbox,
		chromedp.UserDataDir(profile),
		chromedp.Flag("disk-cache-size", "1"),
		// Chromium's own requests (component updates) would queue at the
		// proxy beside the page's.
		chromedp.Flag("disable-component-update", true),
	)
	if b.Proxy != "" {
		opts = append(opts, chromedp.ProxyServer(b.Proxy),
			// Nothing bypasses the proxy, loopback included.
			chromedp.Flag("proxy-bypass-list", "<-loopback>"))
	}
	if b.SPKI != "" {
		opts = append(opts, chromedp.Flag("ignore-certificate-errors-spki-list", b.SPKI))
	}
	if b.Netns != "" {
		ns := b.Netns
		opts = append(opts, chromedp.ModifyCmdFunc(func(cmd *exec.Cmd) {
			ip, err := exec.LookPath("ip")
			if err != nil {
				cmd.Err = err
				return
			}
			cmd.Args = append([]string{ip, "netns", "exec", ns}, cmd.Args...)
			cmd.Path = ip
		}))
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		return browserResult{}, fmt.Errorf("browser: starting: %w", err)
	}
	var (
		mu     sync.Mutex
		urls   = map[network.RequestID]string{}
		failed []string
	)
	err = chromedp.Listen(bctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			urls[e.RequestID] = e.Request.URL
		case *network.EventLoadingFailed:
			failed = append(failed, e.ErrorText+" "+urls[e.RequestID])
		}
	})
	if err != nil {
		return browserResult{}, fmt.Errorf("browser: %w", err)
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(url)); err != nil {
		return browserResult{}, fmt.Errorf("browser: %s: %w", url, err)
	}
	// Navigate returns at the load event; loadEventEnd is set once its
	// handlers have run. The promise waits for it in the page (evaluated
	// in the page's current context: a poll from here may meet the
	// context of the blank page that was).
	got, err := chromedp.Run(bctx, chromedp.Evaluate[struct {
		PLT, Resources, Late, Bytes float64
		Others                      []string
	}](loadTimes, chromedp.EvalAwaitPromise))
	if err != nil {
		return browserResult{}, fmt.Errorf("browser: %s: %w", url, err)
	}
	mu.Lock()
	defer mu.Unlock()
	return browserResult{PLT: time.Duration(got.PLT * float64(time.Millisecond)), Resources: int(got.Resources), Late: int(got.Late),
		Bytes: int64(got.Bytes), Failed: failed, Others: got.Others}, nil
}

// loadTimes resolves, once the page's load event has run, to its load
// time, how many of the site's objects it fetched (each URL once: an
// object fetched again is one object), how many of them ended after the
// load event, the bytes of every body, and the URLs of the other resource
// entries, if any. The times are the navigation entry's and the
// resources', on one clock: the legacy performance.timing counts whole
// milliseconds from another origin, and an object that ended a fraction
// of a millisecond before the load event could read as after it.
const loadTimes = `new Promise(function(resolve) {
	(function check() {
		var nav = performance.getEntriesByType("navigation")[0];
		if (!nav || !(nav.loadEventEnd > 0)) { setTimeout(check, 5); return; }
		var end = nav.loadEventEnd - nav.startTime, late = 0, n = 0, seen = {}, others = [];
		var bytes = nav.encodedBodySize;
		performance.getEntriesByType("resource").forEach(function(r) {
			if (new URL(r.name).pathname.indexOf("` + pageload.SitePrefix + `") != 0 || seen[r.name]) { others.push(r.name); return; }
			seen[r.name] = true;
			n++;
			if (r.responseEnd > end) late++;
			bytes += r.encodedBodySize;
		});
		resolve({PLT: end, Resources: n, Late: late, Bytes: bytes, Others: others});
	})();
})`

// isBrowser reports whether contender key loads with a browser.
func isBrowser(key string) bool {
	_, ok := browserKinds[key]
	return ok
}

// browserLoads completes the browser contenders' records from the web
// servers' log: each load's bytes and objects per path (by the client
// address the servers saw: 10.71.N.1 is path N). A load with a request
// that did not come through the proxy (plain HTTP without its Via) fails:
// the browser went around it.
func browserLoads(recs []record, log []testbed.RequestLog) {
	byLoad := map[string][]testbed.RequestLog{}
	for _, r := range log {
		u, err := url.ParseRequestURI(r.URI)
		if err != nil || !strings.HasPrefix(u.Path, pageload.SitePrefix) {
			continue
		}
		tag := u.Query().Get("load")
		byLoad[tag] = append(byLoad[tag], r)
	}
	for i := range recs {
		rec := &recs[i]
		if rec.Load == "" {
			continue
		}
		rec.Paths = map[string]int{}
		for _, r := range byLoad[rec.Load] {
			rec.Bytes += r.Bytes
			rec.Paths[pathOfClient(r.Remote.Addr())]++
			if r.Local.Port() == 80 && !strings.Contains(r.Via, "intents-proxy") && rec.Failed == "" {
				rec.Failed = fmt.Sprintf("%s reached the server around the proxy (no Via)", r.URI)
			}
		}
	}
}

// pathOfClient names the path of a client address 10.71.N.1: pN.
func pathOfClient(a netip.Addr) string {
	if !a.Unmap().Is4() {
		return "?"
	}
	return fmt.Sprintf("p%d", a.Unmap().As4()[2])
}
