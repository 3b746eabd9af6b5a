package intents_test

// The differential conformance suite: every scenario runs against
// net/http's Transport and against this package's Transport, the zero
// value and one with a Manager (every interface of this host, the EAF
// policy), each built from the same Base settings, and the observable
// outcomes must be equal: status, body bytes, error class, connection
// counts where net/http defines them, trace events. A scenario where this
// package deliberately differs says so and why, and lists what is not
// compared.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/policy"
)

// outcome is what a scenario observed.
type outcome struct {
	Status int
	Body   string // short bodies as they are, long ones as a checksum
	Err    string // error class (see errClass)
	Conns  int    // connections the server accepted, where defined
	Closed int    // of those, closed by the time the scenario looked
	Extra  string // scenario-specific observations
	Events []string
}

// scenario is one row of the table. run makes its servers, then its
// transport with mk (from http.DefaultTransport's settings, changed by
// the function given, if any), and reports. differs, if set, says why this
// package deliberately behaves otherwise, and ignore names the fields not
// compared for that reason.
type scenario struct {
	name    string
	run     func(t *testing.T, mk makeRT) outcome
	differs string
	ignore  []string
}

// makeRT makes the transport under test from a Base changed by build.
type makeRT func(build func(base *http.Transport)) http.RoundTripper

// counted is a test server that counts its connections.
type counted struct {
	*httptest.Server
	mu           sync.Mutex
	conns        int
	closed       int
	closedSignal chan struct{} // a value per closed connection
}

func (c *counted) counts() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conns, c.closed
}

func newCounted(t *testing.T, h http.Handler, start func(*httptest.Server)) *counted {
	c := &counted{closedSignal: make(chan struct{}, 1000)}
	c.Server = httptest.NewUnstartedServer(h)
	if scenarioListener != nil {
		c.Listener.Close()
		c.Listener = scenarioListener(t)
	}
	c.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		c.mu.Lock()
		defer c.mu.Unlock()
		switch s {
		case http.StateNew:
			c.conns++
		case http.StateClosed, http.StateHijacked:
			c.closed++
			c.closedSignal <- struct{}{}
		}
	}
	if start == nil {
		c.Start()
	} else {
		start(c.Server)
	}
	t.Cleanup(c.Close)
	return c
}

// closedOne waits for the server to see one of its connections close:
// "closed", or "still open" after five seconds (net/http closes in
// milliseconds what these scenarios wait for).
func (c *counted) closedOne() string {
	select {
	case <-c.closedSignal:
		return "closed"
	case <-time.After(5 * time.Second):
		return "still open"
	}
}

func plainServer(t *testing.T, h http.HandlerFunc) *counted { return newCounted(t, h, nil) }

// errClass names an error by what a caller can test for.
func errClass(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected EOF"
	case errors.Is(err, io.EOF):
		return "EOF"
	case errors.Is(err, intents.ErrNoPath):
		return "no path"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := err.Error()
	for _, p := range []string{"net/http: ", "http: ", "intents: "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return "other: " + msg
}

func bodyOf(b []byte) string {
	if len(b) <= 64 {
		return string(b)
	}
	return fmt.Sprintf("%d bytes, sha256 %x", len(b), sha256.Sum256(b))
}

// do sends req through rt and records status, body and error.
func do(rt http.RoundTripper, req *http.Request) outcome {
	return outcomeOf(rt.RoundTrip(req))
}

// outcomeOf records a response's status, body and error, and closes it.
func outcomeOf(resp *http.Response, err error) outcome {
	if err != nil {
		return outcome{Err: errClass(err)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return outcome{Status: resp.StatusCode, Body: bodyOf(b), Err: errClass(err)}
}

// outcomeAnd is outcomeOf with extra's account of the response (read
// after its body) in Extra.
func outcomeAnd(resp *http.Response, err error, extra func(*http.Response) string) outcome {
	o := outcomeOf(resp, err)
	if err == nil {
		o.Extra = extra(resp)
	}
	return o
}

func getURL(rt http.RoundTripper, u string) outcome {
	req, _ := http.NewRequest("GET", u, nil)
	return do(rt, req)
}

// withConns adds srv's connection counts to o.
func withConns(o outcome, srv *counted) outcome {
	o.Conns, o.Closed = srv.counts()
	return o
}

// variants are the transports compared, each made from the same Base;
// the one with a Manager decides with pol.
func variants(t *testing.T, pol intents.Policy) []struct {
	name string
	make func(base *http.Transport) http.RoundTripper
} {
	m, err := intents.NewManager(intents.Config{Policy: pol, NoWatch: true})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return []struct {
		name string
		make func(base *http.Transport) http.RoundTripper
	}{
		{"net/http", func(base *http.Transport) http.RoundTripper { return base }},
		{"intents", func(base *http.Transport) http.RoundTripper { return &intents.Transport{Base: base} }},
		{"intents+manager", func(base *http.Transport) http.RoundTripper {
			return &intents.Transport{Base: base, Manager: m}
		}},
	}
}

// countingPolicy is EAF (a Mover too) that counts its decisions.
type countingPolicy struct {
	*policy.EAF
	decided atomic.Int64
}

func (p *countingPolicy) Decide(req *intents.Request, d *intents.Decision) {
	p.decided.Add(1)
	p.EAF.Decide(req, d)
}

// TestConformance runs every scenario with its servers on loopback, which
// the operating system routes: the Manager's policy decides none of them
// (TestNetnsConformance runs them where it does).
func TestConformance(t *testing.T) {
	runConformance(t, variants(t, &policy.EAF{}))
}

// Scenario servers listen where scenarioListener says (nil: on loopback,
// as httptest does); TLS clients then verify the name scenarioServerName
// (set with it: httptest's certificate names example.com and loopback).
//
// With several paths to the servers, as there, a Transport with a Manager
// opens with a destination's first connection an idle spare on each other
// path, measures a path's round trip with a bare handshake, and its policy
// may send a request over the spare: how many connections the server sees
// is the policy's, not net/http's. scenarioPolicyConns says so, and the
// connection counts of the variant with a Manager are not compared.
var (
	scenarioListener    func(t *testing.T) net.Listener
	scenarioServerName  string
	scenarioPolicyConns bool
)

// runConformance runs every scenario with each variant and compares what
// they observed with net/http's.
func runConformance(t *testing.T, vs []struct {
	name string
	make func(base *http.Transport) http.RoundTripper
}) {
	require.GreaterOrEqual(t, len(scenarios()), 40)
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			var want outcome
			for i, v := range vs {
				var made []http.RoundTripper
				mk := func(build func(base *http.Transport)) http.RoundTripper {
					base := http.DefaultTransport.(*http.Transport).Clone()
					if build != nil {
						build(base)
					}
					rt := v.make(base)
					made = append(made, rt)
					return rt
				}
				got := func() outcome {
					defer func() {
						for _, rt := range made {
							closeTransport(rt)
						}
					}()
					return sc.run(t, mk)
				}()
				if i == 0 {
					want = got
					t.Logf("net/http: %+v", want)
					if sc.differs != "" {
						t.Logf("differs deliberately in %v: %s", sc.ignore, sc.differs)
					}
					continue
				}
				if scenarioPolicyConns && v.name == "intents+manager" {
					got.Conns, got.Closed = want.Conns, want.Closed
				}
				for _, f := range sc.ignore {
					switch f {
					case "Conns":
						got.Conns, got.Closed = want.Conns, want.Closed
					case "Events":
						got.Events = want.Events
					case "Extra":
						got.Extra = want.Extra
					}
				}
				assert.Equal(t, want, got, "%s differs from net/http", v.name)
			}
		})
	}
}

func closeTransport(rt http.RoundTripper) {
	switch tr := rt.(type) {
	case *intents.Transport:
		tr.Close()
	case *http.Transport:
		tr.CloseIdleConnections()
	}
}

func text(s string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, s) }
}

// tracer records httptrace events by name.
type tracer struct {
	mu     sync.Mutex
	events []string
}

func (tr *tracer) add(e string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.events = append(tr.events, e)
}

func (tr *tracer) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GetConn: func(string) { tr.add("GetConn") },
		GotConn: func(i httptrace.GotConnInfo) {
			_, isTLS := i.Conn.(*tls.Conn)
			tr.add(fmt.Sprintf("GotConn reused=%v tls=%v", i.Reused, isTLS))
		},
		ConnectStart:         func(string, string) { tr.add("ConnectStart") },
		ConnectDone:          func(_, _ string, err error) { tr.add(fmt.Sprintf("ConnectDone err=%v", err != nil)) },
		TLSHandshakeStart:    func() { tr.add("TLSHandshakeStart") },
		TLSHandshakeDone:     func(tls.ConnectionState, error) { tr.add("TLSHandshakeDone") },
		WroteHeaders:         func() { tr.add("WroteHeaders") },
		WroteRequest:         func(httptrace.WroteRequestInfo) { tr.add("WroteRequest") },
		GotFirstResponseByte: func() { tr.add("GotFirstResponseByte") },
		Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
			tr.add(fmt.Sprintf("Got1xx %d", code))
			return nil
		},
	}
}

func tlsBase(srv *httptest.Server) func(base *http.Transport) {
	return func(base *http.Transport) {
		base.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		if scenarioServerName != "" {
			base.TLSClientConfig.ServerName = scenarioServerName
		}
		base.ForceAttemptHTTP2 = true
	}
}

// proxyServer forwards plain HTTP requests (absolute-form) as a forward
// proxy does, marking the response with its name.
func proxyServer(t *testing.T, name string, seen *atomic.Int32) *httptest.Server {
	p := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		out, _ := http.NewRequest(r.Method, r.URL.String(), r.Body)
		resp, err := http.DefaultClient.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Via", name)
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	t.Cleanup(p.Close)
	return p
}

type proxyKey struct{}

func scenarios() []scenario {
	var s []scenario
	add := func(sc scenario) { s = append(s, sc) }

	add(scenario{name: "GET 200", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, text("hello"))
		return getURL(rt, srv.URL)
	}})
	add(scenario{name: "GET 404", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, http.NotFound)
		return getURL(rt, srv.URL)
	}})
	add(scenario{name: "HEAD", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, text("not sent for HEAD"))
		req, _ := http.NewRequest("HEAD", srv.URL, nil)
		return do(rt, req)
	}})
	add(scenario{name: "POST echo", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(w, r.Body) })
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("form=1"))
		return do(rt, req)
	}})
	add(scenario{name: "PUT 1 MB upload", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, n)
		})
		req, _ := http.NewRequest("PUT", srv.URL, bytes.NewReader(make([]byte, 1<<20)))
		return do(rt, req)
	}})
	add(scenario{name: "chunked response", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			for i := range 5 {
				fmt.Fprintf(w, "part %d;", i)
				http.NewResponseController(w).Flush()
			}
		})
		return getURL(rt, srv.URL)
	}})
	add(scenario{name: "5 MB body", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) { w.Write(bytes.Repeat([]byte("0123456789"), 500_000)) })
		return getURL(rt, srv.URL)
	}})
	add(scenario{name: "gzip decoded", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				io.WriteString(w, "no gzip asked")
				return
			}
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			io.WriteString(zw, "decoded by the transport")
			zw.Close()
		})
		req, _ := http.NewRequest("GET", srv.URL, nil)
		resp, err := rt.RoundTrip(req)
		return outcomeAnd(resp, err, func(resp *http.Response) string { return fmt.Sprintf("uncompressed=%v", resp.Uncompressed) })
	}})
	add(scenario{name: "redirect via Client", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/old" {
				http.Redirect(w, r, "/new", http.StatusFound)
				return
			}
			io.WriteString(w, "at "+r.URL.Path)
		})
		resp, err := (&http.Client{Transport: rt}).Get(srv.URL + "/old")
		return outcomeOf(resp, err)
	}})
	add(scenario{name: "cookies via Client", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			if c, err := r.Cookie("session"); err == nil {
				io.WriteString(w, "session "+c.Value)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: "session", Value: "42"})
			io.WriteString(w, "set")
		})
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Transport: rt, Jar: jar}
		var bodies []string
		for range 2 {
			resp, err := c.Get(srv.URL)
			if err != nil {
				return outcome{Err: errClass(err)}
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			bodies = append(bodies, string(b))
		}
		return outcome{Status: 200, Body: strings.Join(bodies, ", ")}
	}})
	add(scenario{name: "trailers", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum")
			io.WriteString(w, "body")
			w.Header().Set("X-Sum", "abc")
		})
		req, _ := http.NewRequest("GET", srv.URL, nil)
		resp, err := rt.RoundTrip(req)
		return outcomeAnd(resp, err, func(resp *http.Response) string { return resp.Trailer.Get("X-Sum") })
	}})
	add(scenario{name: "1xx Early Hints", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			io.WriteString(w, "final")
		})
		var codes []int
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, _ textproto.MIMEHeader) error { codes = append(codes, code); return nil }})
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		o := do(rt, req)
		o.Extra = fmt.Sprint(codes)
		return o
	}})
	add(scenario{name: "100-continue",
		run: func(t *testing.T, mk makeRT) outcome {
			rt := mk(func(b *http.Transport) { b.ExpectContinueTimeout = 5 * time.Second })
			srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-Reject") != "" {
					w.WriteHeader(http.StatusExpectationFailed)
					return
				}
				io.Copy(w, r.Body)
			})
			req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("payload"))
			req.Header.Set("Expect", "100-continue")
			return do(rt, req)
		}})
	add(scenario{name: "deadline mid-body", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		release := make(chan struct{})
		defer close(release)
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "first part;")
			http.NewResponseController(w).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		return do(rt, req)
	}})
	add(scenario{name: "cancelled before sending", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, text("never"))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		return do(rt, req)
	}})
	add(scenario{name: "server hangs up without answering", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			c, _, _ := http.NewResponseController(w).Hijack()
			c.Close()
		})
		return getURL(rt, srv.URL)
	}})
	for _, raw := range []struct{ name, bytes string }{
		{"garbage response", "SMTP ready\r\n\r\n"},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this"},
	} {
		add(scenario{name: raw.name, run: func(t *testing.T, mk makeRT) outcome {
			rt := mk(nil)
			srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
				c, buf, _ := http.NewResponseController(w).Hijack()
				buf.WriteString(raw.bytes) // and hang up
				buf.Flush()
				c.Close()
			})
			return getURL(rt, srv.URL)
		}})
	}
	add(scenario{name: "keep-alive reuse", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, text("ok"))
		var o outcome
		for range 3 {
			o = getURL(rt, srv.URL)
		}
		return withConns(o, srv)
	}})
	add(scenario{name: "Connection: close", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		})
		var o outcome
		for range 3 {
			o = getURL(rt, srv.URL)
		}
		o.Conns, _ = srv.counts()
		return o
	}})
	add(scenario{name: "Host header", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Host) })
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Host = "virtual.example"
		return do(rt, req)
	}})
	add(scenario{name: "read after Close", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, text("data"))
		req, _ := http.NewRequest("GET", srv.URL, nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return outcome{Err: errClass(err)}
		}
		resp.Body.Close()
		_, err = resp.Body.Read(make([]byte, 10))
		return outcome{Status: resp.StatusCode, Err: errClass(err)}
	}})
	add(scenario{name: "unsupported scheme", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		req, _ := http.NewRequest("GET", "ftp://example.test/", nil)
		_, err := rt.RoundTrip(req)
		return outcome{Extra: fmt.Sprint(err != nil && strings.Contains(err.Error(), "unsupported protocol scheme"))}
	}})
	add(scenario{name: "no host", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		req, _ := http.NewRequest("GET", "http:///path", nil)
		_, err := rt.RoundTrip(req)
		return outcome{Extra: fmt.Sprint(err != nil)}
	}})
	add(scenario{name: "50 concurrent", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Query().Get("i")) })
		var ok atomic.Int32
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() {
				if o := getURL(rt, fmt.Sprintf("%s/?i=%d", srv.URL, i)); o.Body == fmt.Sprint(i) {
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		return outcome{Extra: fmt.Sprint(ok.Load())}
	}})
	add(scenario{name: "TLS", run: func(t *testing.T, mk makeRT) outcome {
		srv := newCounted(t, text("secure"), (*httptest.Server).StartTLS)
		rt := mk(tlsBase(srv.Server))
		req, _ := http.NewRequest("GET", srv.URL, nil)
		resp, err := rt.RoundTrip(req)
		return outcomeAnd(resp, err, func(resp *http.Response) string { return fmt.Sprintf("proto %s tls %v", resp.Proto, resp.TLS != nil) })
	}})
	return append(s, moreScenarios()...)
}

// streamingServer answers /stream with a body that never ends (until the
// client goes) and everything else with "quick".
func streamingServer(t *testing.T) *counted {
	return plainServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stream" {
			io.WriteString(w, "quick")
			return
		}
		io.WriteString(w, "event: 1\n")
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	})
}

// openStreams starts n streams on rt to each url and returns a func that
// closes them.
func openStreams(t *testing.T, rt http.RoundTripper, urls []string, n int) func() {
	var bodies []io.Closer
	for _, u := range urls {
		for range n {
			req, _ := http.NewRequest("GET", u+"/stream", nil)
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			_, err = resp.Body.Read(make([]byte, 9))
			require.NoError(t, err)
			bodies = append(bodies, resp.Body)
		}
	}
	return func() {
		for _, b := range bodies {
			b.Close()
		}
	}
}

// withTimeout runs f; a call still running after five seconds (net/http
// answers these in milliseconds) is reported as "blocked".
func withTimeout(f func() outcome) outcome {
	done := make(chan outcome, 1)
	go func() { done <- f() }()
	select {
	case o := <-done:
		return o
	case <-time.After(5 * time.Second):
		return outcome{Err: "blocked"}
	}
}

func moreScenarios() []scenario {
	var s []scenario
	add := func(sc scenario) { s = append(s, sc) }

	add(scenario{name: "HTTP/2 over TLS", run: func(t *testing.T, mk makeRT) outcome {
		srv := newCounted(t, text("h2"), func(s *httptest.Server) { s.EnableHTTP2 = true; s.StartTLS() })
		rt := mk(tlsBase(srv.Server))
		var o outcome
		var protos []string
		for range 3 {
			req, _ := http.NewRequest("GET", srv.URL, nil)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				return outcome{Err: errClass(err)}
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			o.Status, o.Body = resp.StatusCode, string(b)
			protos = append(protos, resp.Proto)
		}
		o.Extra = strings.Join(protos, " ")
		return withConns(o, srv)
	}})
	add(scenario{name: "h2c", run: func(t *testing.T, mk makeRT) outcome {
		srv := newCounted(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) }),
			func(s *httptest.Server) {
				s.Config.Protocols = new(http.Protocols)
				s.Config.Protocols.SetUnencryptedHTTP2(true)
				s.Start()
			})
		rt := mk(func(b *http.Transport) {
			b.Protocols = new(http.Protocols)
			b.Protocols.SetUnencryptedHTTP2(true)
		})
		return getURL(rt, srv.URL)
	}})
	add(scenario{name: "proxy from Base", run: func(t *testing.T, mk makeRT) outcome {
		srv := plainServer(t, text("origin"))
		var seen atomic.Int32
		p := proxyServer(t, "A", &seen)
		pu, _ := url.Parse(p.URL)
		rt := mk(func(b *http.Transport) { b.Proxy = http.ProxyURL(pu) })
		req, _ := http.NewRequest("GET", srv.URL, nil)
		resp, err := rt.RoundTrip(req)
		return outcomeAnd(resp, err, func(resp *http.Response) string {
			return fmt.Sprintf("via %s, proxy saw %d", resp.Header.Get("Via"), seen.Load())
		})
	}})
	add(scenario{name: "proxy per request by context", run: func(t *testing.T, mk makeRT) outcome {
		srv := plainServer(t, text("origin"))
		var seenA, seenB atomic.Int32
		a, b := proxyServer(t, "A", &seenA), proxyServer(t, "B", &seenB)
		rt := mk(func(base *http.Transport) {
			base.Proxy = func(r *http.Request) (*url.URL, error) {
				if r.Context().Value(proxyKey{}) == "B" {
					return url.Parse(b.URL)
				}
				return url.Parse(a.URL)
			}
		})
		var vias []string
		for _, which := range []string{"A", "B", "A", "B"} {
			req, _ := http.NewRequestWithContext(context.WithValue(context.Background(), proxyKey{}, which), "GET", srv.URL, nil)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				return outcome{Err: errClass(err)}
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			vias = append(vias, resp.Header.Get("Via"))
		}
		return outcome{Extra: fmt.Sprintf("%v A saw %d B saw %d", vias, seenA.Load(), seenB.Load())}
	}})
	add(scenario{name: "proxy per request by header", run: func(t *testing.T, mk makeRT) outcome {
		srv := plainServer(t, text("origin"))
		var seenA, seenB atomic.Int32
		a, b := proxyServer(t, "A", &seenA), proxyServer(t, "B", &seenB)
		rt := mk(func(base *http.Transport) {
			base.Proxy = func(r *http.Request) (*url.URL, error) {
				if r.Header.Get("X-Route") == "B" {
					return url.Parse(b.URL)
				}
				return url.Parse(a.URL)
			}
		})
		var vias []string
		for _, which := range []string{"B", "A", "B"} {
			req, _ := http.NewRequest("GET", srv.URL, nil)
			req.Header.Set("X-Route", which)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				return outcome{Err: errClass(err)}
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			vias = append(vias, resp.Header.Get("Via"))
		}
		return outcome{Extra: fmt.Sprint(vias)}
	}})
	add(scenario{name: "101 Switching Protocols", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			c, buf, _ := http.NewResponseController(w).Hijack()
			defer c.Close()
			buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
			buf.Flush()
			line, _ := buf.ReadString('\n')
			io.WriteString(c, "echo: "+line)
		})
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("Upgrade", "echo")
		req.Header.Set("Connection", "Upgrade")
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return outcome{Err: errClass(err)}
		}
		defer resp.Body.Close()
		rw, ok := resp.Body.(io.ReadWriteCloser)
		if !ok {
			return outcome{Status: resp.StatusCode, Extra: fmt.Sprintf("body %T is not writable", resp.Body)}
		}
		io.WriteString(rw, "ping\n")
		line, _ := bufio.NewReader(rw).ReadString('\n')
		return outcome{Status: resp.StatusCode, Body: line}
	}})
	add(scenario{name: "Base.MaxConnsPerHost holds, with Connection: close", run: func(t *testing.T, mk makeRT) outcome {
		var inFlight, most atomic.Int32
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			n := inFlight.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			defer inFlight.Add(-1)
			w.Header().Set("Connection", "close")
			io.WriteString(w, "ok")
		})
		rt := mk(func(b *http.Transport) { b.MaxConnsPerHost = 2 })
		var ok atomic.Int32
		var wg sync.WaitGroup
		for range 12 {
			wg.Go(func() {
				if getURL(rt, srv.URL).Body == "ok" {
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
		return outcome{Extra: fmt.Sprintf("%d ok, at most 2 at once: %v", ok.Load(), most.Load() <= 2)}
	}})
	add(scenario{name: "Base.IdleConnTimeout", run: func(t *testing.T, mk makeRT) outcome {
		srv := plainServer(t, text("ok"))
		rt := mk(func(b *http.Transport) { b.IdleConnTimeout = 100 * time.Millisecond })
		o := getURL(rt, srv.URL)
		o.Extra = "idle connection " + srv.closedOne()
		return o
	}})
	add(scenario{name: "Base.MaxIdleConnsPerHost", run: func(t *testing.T, mk makeRT) outcome {
		var started sync.WaitGroup
		started.Add(3)
		release := make(chan struct{})
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			started.Done()
			<-release
			io.WriteString(w, "ok")
		})
		rt := mk(func(b *http.Transport) { b.MaxIdleConnsPerHost = 1 })
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() { getURL(rt, srv.URL) })
		}
		started.Wait()
		close(release)
		wg.Wait()
		// The two idle connections beyond the one kept.
		return outcome{Extra: srv.closedOne() + ", " + srv.closedOne()}
	}})
	add(scenario{name: "Base.DialContext to a unix socket", run: func(t *testing.T, mk makeRT) outcome {
		sock := filepath.Join(t.TempDir(), "docker.sock")
		l, err := net.Listen("unix", sock)
		require.NoError(t, err)
		srv := &http.Server{Handler: text("from the unix socket")}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
		rt := mk(func(b *http.Transport) {
			b.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			}
		})
		return getURL(rt, "http://docker/v1.45/info")
	}})
	add(scenario{name: "as http.DefaultTransport", run: func(t *testing.T, mk makeRT) outcome {
		return outcome{Extra: fmt.Sprint(viaDefaultTransport(mk(nil), "/", "/panic", "/"))}
	}})
	add(scenario{name: "Base.MaxIdleConnsPerHost < 0: none kept", run: func(t *testing.T, mk makeRT) outcome {
		srv := plainServer(t, text("ok"))
		rt := mk(func(b *http.Transport) { b.MaxIdleConnsPerHost = -1 })
		o := getURL(rt, srv.URL)
		o.Extra = "after the request, its connection " + srv.closedOne()
		return o
	}})
	add(scenario{name: "Base.TLSHandshakeTimeout", run: func(t *testing.T, mk makeRT) outcome {
		// A server that accepts and never answers the ClientHello.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		var held sync.WaitGroup
		held.Go(func() {
			var conns []net.Conn
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				conns = append(conns, c)
			}
		})
		defer held.Wait()
		defer l.Close()
		rt := mk(func(b *http.Transport) { b.TLSHandshakeTimeout = 200 * time.Millisecond })
		return withTimeout(func() outcome { return getURL(rt, "https://"+l.Addr().String()+"/") })
	}})
	add(scenario{name: "7th request beside 6 streams", run: func(t *testing.T, mk makeRT) outcome {
		srv := streamingServer(t)
		rt := mk(nil)
		stop := openStreams(t, rt, []string{srv.URL}, 6)
		defer stop()
		return withTimeout(func() outcome { return getURL(rt, srv.URL+"/quick") })
	}})
	add(scenario{name: "18th host beside 17 streams", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		var urls []string
		for range 17 {
			urls = append(urls, streamingServer(t).URL)
		}
		stop := openStreams(t, rt, urls, 1)
		defer stop()
		srv := streamingServer(t)
		return withTimeout(func() outcome { return getURL(rt, srv.URL+"/quick") })
	}})
	add(scenario{name: "6 bodies never closed", run: func(t *testing.T, mk makeRT) outcome {
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) { w.Write(make([]byte, 1<<20)) })
		rt := mk(nil)
		var bodies []io.Closer
		for range 6 {
			req, _ := http.NewRequest("GET", srv.URL, nil)
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			bodies = append(bodies, resp.Body) // never read, not closed until the end
		}
		defer func() {
			for _, b := range bodies {
				b.Close()
			}
		}()
		o := withTimeout(func() outcome { return getURL(rt, srv.URL) })
		return o
	}})
	add(scenario{name: "trace events, fresh and reused", run: func(t *testing.T, mk makeRT) outcome {
		srv := plainServer(t, text("ok"))
		rt := mk(nil)
		var tr tracer
		for range 2 {
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), tr.trace()), "GET", srv.URL, nil)
			do(rt, req)
		}
		return outcome{Events: tr.events}
	}})
	add(scenario{name: "trace events over TLS", run: func(t *testing.T, mk makeRT) outcome {
		srv := newCounted(t, text("ok"), (*httptest.Server).StartTLS)
		rt := mk(tlsBase(srv.Server))
		var tr tracer
		var states []string
		for range 2 {
			ctx := httptrace.WithClientTrace(context.Background(), tr.trace())
			ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
				if tc, ok := i.Conn.(*tls.Conn); ok {
					states = append(states, fmt.Sprintf("handshake complete %v", tc.ConnectionState().HandshakeComplete))
				}
			}})
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			do(rt, req)
		}
		return outcome{Events: tr.events, Extra: fmt.Sprint(states)}
	}})
	add(scenario{name: "error text: connection reset before the response", run: func(t *testing.T, mk makeRT) outcome {
		rt := mk(nil)
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			c, _, _ := http.NewResponseController(w).Hijack()
			c.(*net.TCPConn).SetLinger(0)
			c.Close() // a reset before the first byte of the response
		})
		req, _ := http.NewRequest("GET", srv.URL, nil)
		_, err := rt.RoundTrip(req)
		msg := ""
		if err != nil {
			msg = err.Error()
			msg = msg[strings.LastIndex(msg, ": ")+2:] // the addresses differ per run
		}
		return outcome{Extra: fmt.Sprintf("%s / prefixed %v", msg, err != nil && strings.Contains(err.Error(), "Transport failed to read"))}
	}})
	add(scenario{name: "417 to Expect: 100-continue", run: func(t *testing.T, mk makeRT) outcome {
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusExpectationFailed) })
		rt := mk(func(b *http.Transport) { b.ExpectContinueTimeout = 5 * time.Second })
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(strings.Repeat("x", 100000)))
		req.Header.Set("Expect", "100-continue")
		return do(rt, req)
	}})
	add(scenario{name: "localhost by name", run: func(t *testing.T, mk makeRT) outcome {
		srv := plainServer(t, text("via localhost"))
		rt := mk(nil)
		return getURL(rt, strings.Replace(srv.URL, "127.0.0.1", "localhost", 1))
	}})
	add(scenario{name: "large response header", run: func(t *testing.T, mk makeRT) outcome {
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Big", strings.Repeat("h", 64<<10))
			io.WriteString(w, "ok")
		})
		rt := mk(nil)
		req, _ := http.NewRequest("GET", srv.URL, nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return outcome{Err: errClass(err)}
		}
		resp.Body.Close()
		return outcome{Status: resp.StatusCode, Extra: fmt.Sprint(len(resp.Header.Get("X-Big")))}
	}})
	add(scenario{name: "response header too large", run: func(t *testing.T, mk makeRT) outcome {
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Big", strings.Repeat("h", 64<<10))
			io.WriteString(w, "ok")
		})
		rt := mk(func(b *http.Transport) { b.MaxResponseHeaderBytes = 4 << 10 })
		return getURL(rt, srv.URL)
	}})
	add(scenario{name: "CloseIdleConnections closes", run: func(t *testing.T, mk makeRT) outcome {
		srv := plainServer(t, text("ok"))
		rt := mk(nil)
		o := getURL(rt, srv.URL)
		rt.(interface{ CloseIdleConnections() }).CloseIdleConnections()
		o.Extra = srv.closedOne()
		return o
	}})
	add(scenario{name: "POST not replayed on a dead reused connection", run: func(t *testing.T, mk makeRT) outcome {
		var n atomic.Int32
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 2 {
				c, _, _ := http.NewResponseController(w).Hijack()
				c.Close() // after reading the request: it may have been processed
				return
			}
			io.WriteString(w, "ok")
		})
		rt := mk(nil)
		getURL(rt, srv.URL)
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("pay"))
		o := do(rt, req)
		o.Extra = fmt.Sprintf("server saw %d requests", n.Load())
		return o
	}})
	add(scenario{name: "behind httputil.ReverseProxy", run: func(t *testing.T, mk makeRT) outcome {
		origin := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "origin saw "+r.URL.Path+" forwarded for "+strings.Split(r.Header.Get("X-Forwarded-For"), ",")[0])
		})
		target, _ := url.Parse(origin.URL)
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.Transport = mk(nil)
		front := httptest.NewServer(rp)
		defer front.Close()
		resp, err := http.Get(front.URL + "/page")
		return outcomeOf(resp, err)
	}})
	add(scenario{name: "GET retried on a dead reused connection", run: func(t *testing.T, mk makeRT) outcome {
		var n atomic.Int32
		srv := plainServer(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 2 {
				c, _, _ := http.NewResponseController(w).Hijack()
				c.Close()
				return
			}
			io.WriteString(w, "ok")
		})
		rt := mk(nil)
		getURL(rt, srv.URL)
		o := getURL(rt, srv.URL)
		o.Extra = fmt.Sprintf("server saw %d requests", n.Load())
		return o
	}})
	return s
}

// TestConformanceLoopbackNames: a host name that the hosts file maps to
// loopback reaches the server over loopback even when intents and a
// policy choose paths (net/http cannot take part: its resolver reads the
// system's hosts file, not this test's).
func TestConformanceLoopbackNames(t *testing.T) {
	srv := plainServer(t, text("over loopback"))
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	hosts := filepath.Join(t.TempDir(), "hosts")
	require.NoError(t, os.WriteFile(hosts, []byte("127.0.0.1 vm.test\n"), 0o644))
	m, err := intents.NewManager(intents.Config{Policy: &policy.EAF{}, NoWatch: true, HostsFile: hosts})
	require.NoError(t, err)
	defer m.Close()
	tr := &intents.Transport{Manager: m}
	defer tr.Close()
	for _, in := range []intents.Intents{
		{},
		{Types: map[intents.InterfaceType]intents.Level{intents.TypeCellular: intents.LevelProhibit}},
		{Types: map[intents.InterfaceType]intents.Level{intents.TypeWired: intents.LevelPrefer}},
	} {
		req, _ := http.NewRequestWithContext(intents.WithIntents(context.Background(), in), "GET", "http://vm.test:"+port+"/", nil)
		assert.Equal(t, outcome{Status: 200, Body: "over loopback"}, do(tr, req), "%v", in)
	}
	// A prohibition of the loopback interface by name holds, as by type.
	lo := ""
	for _, p := range m.Paths() {
		if p.Type == intents.TypeLoopback {
			lo = p.Name
		}
	}
	require.NotEmpty(t, lo)
	for _, in := range []intents.Intents{
		{Interfaces: map[string]intents.Level{lo: intents.LevelProhibit}},
		{Interfaces: map[string]intents.Level{"eth9-absent": intents.LevelRequire}},
	} {
		req, _ := http.NewRequestWithContext(intents.WithIntents(context.Background(), in), "GET", "http://vm.test:"+port+"/", nil)
		assert.Equal(t, outcome{Err: "no path"}, do(tr, req), "%v", in)
		req, _ = http.NewRequestWithContext(intents.WithIntents(context.Background(), in), "GET", srv.URL, nil)
		assert.Equal(t, outcome{Err: "no path"}, do(tr, req), "%v by address", in)
	}
}

// TestTransportAsDefaultTransport makes the zero Transport, with no Base,
// http.DefaultTransport, the headline use: its settings come from the
// standard library's own as it was, and it serves, closes and recovers
// like it.
func TestTransportAsDefaultTransport(t *testing.T) {
	tr := &intents.Transport{}
	defer tr.Close()
	assert.Equal(t, []string{"ok", "error", "ok", "ok"}, viaDefaultTransport(tr, "/", "/panic", "/", "/"))
}

// viaDefaultTransport makes rt http.DefaultTransport for a while and GETs
// the paths from a server whose /panic aborts its handler, then closes
// the server (which closes http.DefaultTransport's idle connections):
// each body, or "error".
func viaDefaultTransport(rt http.RoundTripper, paths ...string) []string {
	saved := http.DefaultTransport
	http.DefaultTransport = rt
	defer func() { http.DefaultTransport = saved }()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic(http.ErrAbortHandler)
		}
		io.WriteString(w, "ok")
	}))
	var results []string
	for _, p := range paths {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			results = append(results, "error")
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		results = append(results, string(b))
	}
	srv.Close()
	return results
}
