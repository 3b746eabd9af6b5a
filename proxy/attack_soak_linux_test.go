package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"

	"github.com/sockintents/intents/internal/testbed"
)

// An attack soak: every attack on the proxy's availability at once, on
// loopback, while a normal client at an address of its own asks for a
// page and opens a tunnel every 100 ms. Run longer with
//
//	go test -run TestAttackSoak -v ./proxy/ -args -attack.soak=10m
var attackSoakFor = flag.Duration("attack.soak", 90*time.Second, "how long TestAttackSoak's attacks run")

// Addresses of the soak: the attackers that are allowed, those that are
// not, and the normal client.
var (
	attackerAddr = netip.MustParseAddr("127.0.0.1")
	outsiderAddr = netip.MustParseAddr("127.0.0.2")
	normalAddr   = netip.MustParseAddr("127.0.0.3")
)

// probeBound is what the soak asserts of each of the normal client's
// probes: served, and within this. The attacks it guards against stalled
// a client for seconds (4.4 s behind idle clients, 9 s behind stalled
// handshakes, 28 s behind clients that are not allowed); the slowest
// probe takes a few hundred milliseconds on a busy two-core machine
// under the race detector, so the bound is generous: it tells a stall,
// not a speed. The soak logs the distribution against the 100 ms a
// person notices.
const probeBound = 2 * time.Second

// attackerPace is how soon an attacker reconnects once the proxy closed
// its connection.
const attackerPace = 200 * time.Millisecond

func TestAttackSoak(t *testing.T) {
	testbed.SkipIfShort(t, (*attackSoakFor + 20*time.Second).Round(time.Minute).String())
	// Its loopback addresses stand for hosts of their own, none the
	// proxy's: every client holds a client's share.
	was := isHostAddr
	isHostAddr = func(netip.Addr) bool { return false }
	t.Cleanup(func() { isHostAddr = was })
	from := map[netip.Addr]*net.Dialer{attackerAddr: {}, outsiderAddr: dialerFrom(t, outsiderAddr), normalAddr: dialerFrom(t, normalAddr)}
	hanging := hangingServer(t)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, strings.Repeat("x", 10<<10))
	}))
	defer page.Close()
	echo := echoServer(t, nil)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	fds := openFiles(t)

	p := newTLSProxy(t, func(s *Server) {
		s.Allow = []netip.Prefix{netip.PrefixFrom(attackerAddr, 32), netip.PrefixFrom(normalAddr, 32)}
		// A quarter of the default limits, and as many attackers: the
		// same fight on two cores shared by attackers and proxy.
		s.MaxClients, s.MaxTunnels = 256, 256
		s.ReadHeaderTimeout = 2 * time.Second
		s.TunnelIdleTimeout = 5 * time.Second
		s.RequestBodyTimeout = 5 * time.Second
		s.ResponseHeaderTimeout = 10 * time.Second
	})
	metricsAddr := serveMetrics(t, p.testProxy)

	ctx, cancel := context.WithTimeout(context.Background(), *attackSoakFor)
	defer cancel()
	var attacks sync.WaitGroup
	var attackConns atomic.Int64
	// hold dials addr from a and keeps the connection, after sending
	// what first says, until the soak ends; it dials again when the proxy
	// closes it.
	hold := func(n int, a netip.Addr, addr string, first func(net.Conn)) {
		for range n {
			attacks.Go(func() {
				for ctx.Err() == nil {
					c, err := from[a].DialContext(ctx, "tcp", addr)
					if err != nil {
						continue
					}
					attackConns.Add(1)
					stop := context.AfterFunc(ctx, func() { c.Close() })
					if first != nil {
						first(c)
					}
					io.Copy(io.Discard, c) // until the proxy closes it, or the soak ends
					stop()
					c.Close()
					// An attacker elsewhere spends its own CPU reconnecting;
					// here it would spend the proxy's.
					select {
					case <-ctx.Done():
					case <-time.After(attackerPace):
					}
				}
			})
		}
	}
	up := strings.TrimPrefix(page.URL, "http://")
	hangUp := strings.TrimPrefix(hanging.URL, "http://")
	// Clients not allowed, reconnecting as soon as they are closed.
	hold(100, outsiderAddr, p.addr, nil)
	hold(50, outsiderAddr, p.socks, nil)
	// Allowed clients that send nothing, or stop halfway: with the idle
	// clients below, more than the 256 a listener serves at once.
	hold(150, attackerAddr, p.addr, nil)
	hold(50, attackerAddr, p.tlsAddr, nil)
	hold(50, attackerAddr, p.socks, func(c net.Conn) { c.Write([]byte{5, 1}) })
	hold(50, attackerAddr, p.addr, func(c net.Conn) { io.WriteString(c, "GET "+page.URL+"/ HTTP/1.1\r\nHost: ") })
	// Idle keep-alive clients.
	hold(150, attackerAddr, p.addr, func(c net.Conn) {
		io.WriteString(c, "GET "+page.URL+"/ HTTP/1.1\r\nHost: "+up+"\r\n\r\n")
	})
	// Requests whose response never comes, and uploads that stop.
	hold(20, attackerAddr, p.addr, func(c net.Conn) {
		io.WriteString(c, "GET "+hanging.URL+"/ HTTP/1.1\r\nHost: "+hangUp+"\r\n\r\n")
	})
	hold(20, attackerAddr, p.addr, func(c net.Conn) {
		io.WriteString(c, "POST "+page.URL+"/ HTTP/1.1\r\nHost: "+up+"\r\nContent-Length: 1000000\r\n\r\nx")
	})
	// Tunnels held open and quiet.
	hold(100, attackerAddr, p.addr, func(c net.Conn) {
		io.WriteString(c, "CONNECT "+echo+" HTTP/1.1\r\nHost: "+echo+"\r\n\r\n")
	})
	// The metrics listener, piled on.
	hold(100, attackerAddr, metricsAddr, nil)
	// HTTP/2 clients stopped halfway through a header block.
	attacks.Go(func() {
		for ctx.Err() == nil {
			c, err := tls.DialWithDialer(from[attackerAddr], "tcp", p.tlsAddr, &tls.Config{RootCAs: p.ca.Pool, NextProtos: []string{"h2"}})
			if err != nil {
				continue
			}
			stop := context.AfterFunc(ctx, func() { c.Close() })
			io.WriteString(c, http2.ClientPreface)
			fr := http2.NewFramer(c, c)
			fr.WriteSettings()
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x82}})
			io.Copy(io.Discard, c)
			stop()
			c.Close()
		}
	})

	// The normal client: a page on a new connection, and a tunnel, every
	// 100 ms.
	normal := &http.Client{Transport: &http.Transport{
		Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: p.addr}),
		DialContext:       from[normalAddr].DialContext,
		DisableKeepAlives: true,
	}, Timeout: 10 * time.Second}
	var took []time.Duration
	failed := 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ctx.Err() == nil; i++ {
		select {
		case <-ctx.Done():
			continue
		case <-tick.C:
		}
		start := time.Now()
		var err error
		if i%2 == 0 {
			err = getPage(normal, page.URL)
		} else {
			err = echoThrough(from[normalAddr], p.addr, echo)
		}
		if err != nil {
			failed++
			t.Logf("probe %d failed after %v: %v", i, time.Since(start), err)
			continue
		}
		took = append(took, time.Since(start))
		if testing.Verbose() && time.Since(start) > 100*time.Millisecond {
			t.Logf("probe %d (%s) took %v", i, []string{"page", "tunnel"}[i%2], time.Since(start))
		}
	}
	cancel()
	attacks.Wait()
	slices.Sort(took)
	require.NotEmpty(t, took)
	q := func(f float64) time.Duration { return took[min(len(took)-1, int(f*float64(len(took))))] }
	t.Logf("%v of attacks (%d attack connections): %d probes served, %d failed; median %v, p99 %v, worst %v; %d over 100 ms",
		*attackSoakFor, attackConns.Load(), len(took), failed, q(0.5), q(0.99), took[len(took)-1],
		len(took)-sort.Search(len(took), func(i int) bool { return took[i] > 100*time.Millisecond }))
	assert.Zero(t, failed, "probes of the normal client failed")
	assert.LessOrEqual(t, took[len(took)-1], probeBound, "the slowest probe")

	// Once the attackers are gone, descriptors and memory go back.
	p.Transport.CloseIdleConnections()
	require.Eventually(t, func() bool { return openFiles(t) <= fds+64 }, 20*time.Second, 10*time.Millisecond,
		"descriptors: %d before, %d after", fds, openFiles(t))
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("heap in use: %d MB before, %d MB after", before.HeapInuse>>20, after.HeapInuse>>20)
	assert.Less(t, after.HeapInuse, before.HeapInuse+64<<20, "memory held after the attacks")
}

// getPage fetches target through c and reads it whole.
func getPage(c *http.Client, target string) error {
	resp, err := c.Get(target)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return &statusError{resp.StatusCode}
	}
	return nil
}

type statusError struct{ code int }

func (e *statusError) Error() string { return http.StatusText(e.code) }

// echoThrough opens a CONNECT tunnel to echo through the proxy at addr
// and has four bytes echoed.
func echoThrough(d *net.Dialer, addr, echo string) error {
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "CONNECT "+echo+" HTTP/1.1\r\nHost: "+echo+"\r\n\r\n"); err != nil {
		return err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return &statusError{resp.StatusCode}
	}
	if _, err := io.WriteString(c, "ping"); err != nil {
		return err
	}
	_, err = io.ReadFull(br, make([]byte, 4))
	return err
}
