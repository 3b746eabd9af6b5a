package intents

// Hostile servers, faults and bad input. Each test here stands for a
// finding that was reproduced against loopback servers: a response that
// crashed the process, corrupted a body, hung a call or took memory a
// server's number asked for. Every test bounds its own run (a hang is a
// failure, not a stuck suite) and memory cases measure the heap.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/testbed"
)

// hangLimit is how long a call may take before the test calls it a hang:
// far above anything these calls need, far below the waits they hung in.
const hangLimit = 10 * time.Second

// within runs f and fails t if it has not returned after hangLimit.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(hangLimit):
		t.Fatalf("%s did not return within %v", what, hangLimit)
	}
}

// allocated runs f and returns the bytes it (and anything else running)
// allocated on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// hijacked writes a raw HTTP/1.1 response head and then body on w's
// connection and closes it: a server whose bytes are exactly these.
func hijacked(w http.ResponseWriter, head string, body []byte) {
	c, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	defer c.Close()
	buf.WriteString(head)
	buf.Write(body)
	buf.Flush()
}

// streamUntilGone writes zeros to w until the client goes away or limit
// bytes are out.
func streamUntilGone(w http.ResponseWriter, limit int64) {
	chunk := make([]byte, 64<<10)
	for n := int64(0); n < limit; n += int64(len(chunk)) {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// hugeRangeServer answers every Range request with the first range of an
// object of d+1000 bytes, 0-(d-1): consistent, and d bytes where fewer were
// asked for. It sends up to send of them. Plain GETs get "plain".
func hugeRangeServer(t *testing.T, d, send int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("Range") == "" {
			io.WriteString(w, "plain")
			return
		}
		w.Header().Set("Content-Range", fmt.Sprintf("bytes 0-%d/%d", d-1, d+1000))
		w.Header().Set("Content-Length", strconv.FormatInt(d, 10))
		w.WriteHeader(http.StatusPartialContent)
		streamUntilGone(w, send)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Finding 1: a first range larger than asked for crashed the process
// (makeslice from the server's number), ran it out of memory, or held
// hundreds of MB. It must fall back to a plain GET, reading nothing of it.
func TestHostileRangeLargerThanAsked(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tr      func() *Transport
		d, send int64
	}{
		{"aggregate 1<<62", func() *Transport { return &Transport{Aggregate: &Aggregate{MinSize: 1}} }, 1 << 62, 0},
		{"aggregate 1<<40", func() *Transport { return &Transport{Aggregate: &Aggregate{MinSize: 1}} }, 1 << 40, 0},
		{"aggregate 300 MiB sent", func() *Transport { return &Transport{Aggregate: &Aggregate{MinSize: 1, Window: 16 << 20}} }, 300 << 20, 300 << 20},
		{"two-step 300 MiB sent", func() *Transport { return &Transport{TwoStep: 8192} }, 300 << 20, 300 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := hugeRangeServer(t, tc.d, tc.send)
			tr := tc.tr()
			defer tr.CloseIdleConnections()
			runtime.GC()
			var body []byte
			n := allocated(func() {
				within(t, "RoundTrip", func() { body = fetchAll(t, tr, srv.URL) })
			})
			assert.Equal(t, "plain", string(body), "a plain GET instead of the oversized range")
			assert.Less(t, n, uint64(32<<20), "allocated %d MB: a server's number sized something", n>>20)
		})
	}
}

// versionedServer serves a 100,000-byte object, version 1, with ETag and
// Last-Modified for the first range and plain GETs; second, when set,
// answers every later range request instead.
type versionedServer struct {
	*httptest.Server
	log rangeLog
}

const hostileSize = 100_000

var lastModified = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

func newVersionedServer(t *testing.T, etag string, second func(w http.ResponseWriter, r *http.Request)) *versionedServer {
	s := &versionedServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.log.add(r)
		if rg := r.Header.Get("Range"); rg != "" && !strings.HasPrefix(rg, "bytes=0-") {
			second(w, r)
			return
		}
		if etag != "" {
			w.Header().Set("ETag", etag)
		}
		http.ServeContent(w, r, "", lastModified, bytes.NewReader(content(hostileSize, 1)))
	}))
	t.Cleanup(s.Close)
	return s
}

// Finding 2: the two-step download's second part was not checked against
// its Content-Range: short parts came out as a clean EOF, long ones with
// junk at the end. Now a part is exactly its range or an error, and a part
// whose lengths disagree is not used at all.
func TestHostileTwoStepSecondPartLength(t *testing.T) {
	obj := content(hostileSize, 1)
	rest := obj[8192:]
	head := func(extra string) string {
		return "HTTP/1.1 206 Partial Content\r\nETag: \"v1\"\r\nContent-Range: bytes 8192-99999/100000\r\n" + extra + "\r\n"
	}
	chunked := func(b []byte) []byte {
		return fmt.Appendf(nil, "%x\r\n%s\r\n0\r\n\r\n", len(b), b)
	}
	for _, tc := range []struct {
		name    string
		respond func(w http.ResponseWriter)
		wantErr error // nil: the exact object
	}{
		{"Content-Length disagrees", func(w http.ResponseWriter) {
			hijacked(w, head("Content-Length: 1000\r\n"), rest[:1000])
		}, nil},
		{"chunked and short", func(w http.ResponseWriter) {
			hijacked(w, head("Transfer-Encoding: chunked\r\n"), chunked(rest[:1000]))
		}, io.ErrUnexpectedEOF},
		{"close-delimited, cut at 40000", func(w http.ResponseWriter) {
			hijacked(w, head("Connection: close\r\n"), rest[:40000-8192])
		}, io.ErrUnexpectedEOF},
		{"500 bytes too many", func(w http.ResponseWriter) {
			hijacked(w, head("Transfer-Encoding: chunked\r\n"), chunked(append(append([]byte(nil), rest...), make([]byte, 500)...)))
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newVersionedServer(t, `"v1"`, func(w http.ResponseWriter, _ *http.Request) { tc.respond(w) })
			tr := &Transport{TwoStep: 8192}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequest("GET", srv.URL, nil)
			var got []byte
			var err error
			within(t, "the download", func() {
				var resp *http.Response
				if resp, err = tr.RoundTrip(req); err == nil {
					got, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					assert.EqualValues(t, hostileSize, resp.ContentLength)
				}
			})
			if tc.wantErr == nil {
				require.NoError(t, err)
				assert.Equal(t, obj, got, "byte for byte the object")
				return
			}
			require.ErrorIs(t, err, tc.wantErr)
			assert.Equal(t, obj[:len(got)], got, "what came before the error is the object's")
		})
	}
}

// Finding 3: a server ignoring If-Range gave a second part of another
// version, and the caller got v1[:8192] + v2[8192:]. Whatever the
// validator, the caller now gets one version whole.
func TestHostileTwoStepIgnoredIfRange(t *testing.T) {
	v2 := content(hostileSize, 2)
	for _, tc := range []struct {
		name      string
		firstETag string // "" validates by Last-Modified
		header    func(h http.Header)
	}{
		{"another ETag", `"v1"`, func(h http.Header) { h.Set("ETag", `"v2"`) }},
		{"no ETag", `"v1"`, func(http.Header) {}},
		{"changed Last-Modified", "", func(h http.Header) {
			h.Set("Last-Modified", lastModified.Add(time.Hour).Format(http.TimeFormat))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newVersionedServer(t, tc.firstETag, func(w http.ResponseWriter, r *http.Request) {
				// The object is v2 now, and If-Range is ignored.
				tc.header(w.Header())
				r.Header.Del("If-Range")
				http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(v2))
			})
			// A plain GET, after the first range, finds v2 too.
			tr := &Transport{TwoStep: 8192}
			defer tr.CloseIdleConnections()
			var body []byte
			within(t, "the download", func() { body = fetchAll(t, tr, srv.URL+"/obj") })
			old := content(hostileSize, 1)
			assert.True(t, bytes.Equal(body, old) || bytes.Equal(body, v2), "one version whole, never a stitch")
			assert.False(t, bytes.Equal(body[:8192], old[:8192]) && bytes.Equal(body[8192:], v2[8192:]), "v1 head + v2 tail")
			ranges := srv.log.get()
			require.Len(t, ranges, 3, "first range, the ignored If-Range, then a plain GET: %q", ranges)
			assert.Equal(t, "", ranges[2])
		})
	}
}

// Finding 4: at the total limit with every connection busy, a request to a
// new host waited for the idle timeout (30 s) after the others finished,
// because only its own host's idle connections were considered for room.
func TestHostileNewHostAtTheTotalLimit(t *testing.T) {
	release := make(chan struct{})
	var inHandler sync.WaitGroup
	inHandler.Add(DefaultMaxConns)
	busy := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			inHandler.Done()
			<-release
		}
		io.WriteString(w, "ok")
	})
	var hosts []*httptest.Server
	for range 4 {
		s := httptest.NewServer(busy)
		defer s.Close()
		hosts = append(hosts, s)
	}
	tr := &Transport{MaxConnsPerHost: DefaultMaxConnsPerHost, MaxConns: DefaultMaxConns, IdleConnTimeout: time.Hour}
	defer tr.CloseIdleConnections()
	tr.init()
	queued := make(chan struct{}, 1)
	tr.core.sched.testHookQueued = func() {
		select {
		case queued <- struct{}{}:
		default:
		}
	}
	get := func(url string) error {
		resp, err := tr.RoundTrip(must(http.NewRequest("GET", url, nil)))
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return err
	}
	// 6 + 6 + 5 requests to three hosts fill the 17 connections.
	var wg sync.WaitGroup
	for i := range DefaultMaxConns {
		wg.Go(func() { assert.NoError(t, get(hosts[i%3].URL+"/busy")) })
	}
	inHandler.Wait()
	for len(queued) > 0 { // the requests beyond a host's 6 that queued on the way
		<-queued
	}
	fourth := make(chan error, 1)
	go func() { fourth <- get(hosts[3].URL + "/new") }()
	<-queued // the fourth host's request waits at the total limit
	close(release)
	wg.Wait() // 17 idle connections to the three hosts now
	select {
	case err := <-fourth:
		require.NoError(t, err)
	case <-time.After(hangLimit):
		t.Fatal("the request to a fourth host still waits with 17 idle connections to close for it")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Finding 5: closing an aggregated body whose first range stalled blocked
// for ever, and so did a Read waiting for bytes.
func TestHostileAggregateCloseWhileStalled(t *testing.T) {
	const size = 2_000_000
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var first, last int64
		fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &first, &last)
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", first, last, size))
		w.Header().Set("Content-Length", strconv.FormatInt(last-first+1, 10))
		w.WriteHeader(http.StatusPartialContent)
		w.Write(make([]byte, min(1000, last-first+1)))
		http.NewResponseController(w).Flush()
		<-r.Context().Done() // and nothing more, until the client goes
	}))
	defer srv.Close()
	tr := &Transport{Aggregate: &Aggregate{MinSize: 1, MinChunk: 64 << 10}}
	defer tr.CloseIdleConnections()
	// No deadline on the request: only Close can end the stall.
	resp, err := tr.RoundTrip(must(http.NewRequest("GET", srv.URL, nil)))
	require.NoError(t, err)
	first := make([]byte, 1000)
	_, err = io.ReadFull(resp.Body, first)
	require.NoError(t, err)
	readErr := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(make([]byte, 10))
		readErr <- err
	}()
	within(t, "Close", func() { resp.Body.Close() })
	select {
	case err := <-readErr:
		assert.Error(t, err, "a Read blocked across Close fails")
	case <-time.After(hangLimit):
		t.Fatal("a Read blocked across Close never returned")
	}
}

// Finding 6: a Pool handed out, as reused, a connection on which the server
// had said goodbye (unread bytes, then its FIN): the caller read the
// goodbye as its answer. net/http discards idle connections that received
// unsolicited bytes; so does the Pool.
func TestHostilePoolDiscardsConnectionsWithUnreadBytes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	var served sync.WaitGroup
	served.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			served.Go(func() {
				defer c.Close()
				if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
					return
				}
				// The answer, and at once the goodbye of a server whose idle
				// timeout is over (SMTP, FTP, PostgreSQL): one write, so both
				// are in the client's socket once the answer is.
				io.WriteString(c, "ok\n421 idle timeout, bye\n")
			})
		}
	})
	defer served.Wait()
	defer l.Close()
	p := testPool(t)
	c, _, err := p.Get(t.Context(), "tcp", l.Addr().String())
	require.NoError(t, err)
	io.WriteString(c, "hello\n")
	answer := make([]byte, 3)
	_, err = io.ReadFull(c, answer)
	require.NoError(t, err)
	assert.Equal(t, "ok\n", string(answer))
	c.Release()

	c, reused, err := p.Get(t.Context(), "tcp", l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	assert.False(t, reused, "a connection with unread bytes is not handed out again")
	io.WriteString(c, "hello\n")
	_, err = io.ReadFull(c, answer)
	require.NoError(t, err)
	assert.Equal(t, "ok\n", string(answer), "a fresh connection's answer, not the goodbye")
}

// Finding 7a: a malformed datagram, or one with the right ID but another
// question, arriving before the genuine reply ended the attempt. Now the
// wait goes on for a valid reply, as Go's resolver does.
func TestHostileResolverForgedDatagramFirst(t *testing.T) {
	for name, forged := range map[string]func(q *dns.Msg) []byte{
		"malformed": func(q *dns.Msg) []byte {
			b := pack(reply(q))
			return b[:len(b)-3]
		},
		"wrong question": func(q *dns.Msg) []byte {
			m := reply(q, "www.test. 60 IN A 203.0.113.66")
			m.Question[0].Name = "evil.test."
			return pack(m)
		},
		"wrong ID": func(q *dns.Msg) []byte {
			m := reply(q, "www.test. 60 IN A 203.0.113.66")
			m.Id++
			return pack(m)
		},
		"larger than advertised": func(q *dns.Msg) []byte {
			m := reply(q, "www.test. 60 IN A 203.0.113.66")
			for range 20 {
				m.Extra = append(m.Extra, must(dns.NewRR(`www.test. 60 IN TXT "`+strings.Repeat("x", 200)+`"`)))
			}
			return pack(m)
		},
	} {
		t.Run(name, func(t *testing.T) {
			srv := twoDatagramDNS(t, func(q *dns.Msg) [][]byte {
				return [][]byte{forged(q), pack(reply(q, "www.test. 60 IN A 192.0.2.1"))}
			})
			r := testResolver(nil)
			r.Timeout = hangLimit
			addrs, err := r.LookupPath(t.Context(), loPath(srv), "tcp", "www.test")
			require.NoError(t, err)
			assert.Equal(t, []string{"192.0.2.1"}, addrStrings(addrs))
		})
	}
}

// Finding 7b: TTL 0xFFFFFFFF was cached until 2163. A TTL with the top bit
// set counts as 0 (RFC 2181 §8); others are capped by MaxTTL.
func TestHostileResolverTTLs(t *testing.T) {
	for _, tc := range []struct {
		ttl     string
		advance time.Duration // after which the name is asked again
	}{
		{"4294967295", time.Second},
		{"2147483648", time.Second},
		{"2147483647", defaultMaxTTL + time.Second},
	} {
		t.Run(tc.ttl, func(t *testing.T) {
			srv := startFakeDNS(t, answering("www.test. "+tc.ttl+" IN A 192.0.2.1"), nil)
			clock := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
			r := testResolver(&clock)
			for range 2 {
				addrs, err := r.LookupPath(t.Context(), loPath(srv), "tcp", "www.test")
				require.NoError(t, err)
				assert.Equal(t, []string{"192.0.2.1"}, addrStrings(addrs))
				clock = clock.Add(tc.advance)
			}
			assert.EqualValues(t, 2, srv.queries.Load(), "asked again, not cached for ever")
		})
	}
}

// Finding 7c: a context cancelled without a deadline ended the lookup only
// after Resolver.Timeout.
func TestHostileResolverCancelWithoutDeadline(t *testing.T) {
	asked := make(chan struct{}, 1)
	srv := startFakeDNS(t, func(*dns.Msg) []byte {
		select {
		case asked <- struct{}{}:
		default:
		}
		return nil // never answers
	}, nil)
	r := testResolver(nil)
	r.Timeout = time.Hour
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-asked
		cancel()
	}()
	var err error
	within(t, "a cancelled lookup", func() { _, err = r.LookupPath(ctx, loPath(srv), "tcp", "www.test") })
	assert.ErrorIs(t, err, context.Canceled)
}

// Finding 7d: an A record of class CH was taken as an address.
func TestHostileResolverClassINOnly(t *testing.T) {
	srv := startFakeDNS(t, func(q *dns.Msg) []byte {
		m := reply(q)
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassCHAOS, Ttl: 60},
			A: net.IPv4(192, 0, 2, 66)}}
		return pack(m)
	}, nil)
	addrs, err := testResolver(nil).LookupPath(t.Context(), loPath(srv), "tcp", "www.test")
	assert.Empty(t, addrs)
	var de *net.DNSError
	require.ErrorAs(t, err, &de)
	assert.True(t, de.IsNotFound, "%v", err)
}

// faultyObject serves a 1,000,000-byte object with Range and an ETag,
// except where fault, called first, answers the request itself.
func faultyObject(t *testing.T, fault func(w http.ResponseWriter, r *http.Request) bool) (*httptest.Server, *Transport) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fault(w, r) {
			return
		}
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "", time.Time{}, testbed.NewObject(faultySize))
	}))
	t.Cleanup(srv.Close)
	tr := &Transport{Aggregate: &Aggregate{MinSize: 1, MinChunk: 64 << 10}}
	t.Cleanup(tr.CloseIdleConnections)
	return srv, tr
}

const faultySize = 1_000_000

// Finding 9: on one path, one reset range ended an aggregated download
// ("every path failed"). A failed range is now asked for again.
func TestHostileAggregateRetriesAResetRange(t *testing.T) {
	var resets atomic.Int32
	srv, tr := faultyObject(t, func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasPrefix(r.Header.Get("Range"), "bytes=0-") || resets.Add(1) > 2 {
			return false
		}
		// The first two ranges after the first: reset mid-way.
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		io.WriteString(c, "HTTP/1.1 206 Partial Content\r\nETag: \"v1\"\r\n")
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
		return true
	})
	var body []byte
	within(t, "the download", func() { body = fetchAll(t, tr, srv.URL) })
	assert.Equal(t, testbed.ObjectSum(faultySize), sha256.Sum256(body))
	assert.GreaterOrEqual(t, resets.Load(), int32(2), "the resets happened")
}

// A range that fails every time ends the download with an error, after a
// bounded number of attempts: no endless retrying.
func TestHostileAggregateGivesUpOnARangeThatAlwaysFails(t *testing.T) {
	var attempts atomic.Int32
	srv, tr := faultyObject(t, func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasPrefix(r.Header.Get("Range"), "bytes=65536-") {
			return false
		}
		attempts.Add(1)
		http.Error(w, "no", http.StatusInternalServerError)
		return true
	})
	resp, err := tr.RoundTrip(must(http.NewRequest("GET", srv.URL, nil)))
	require.NoError(t, err)
	within(t, "the download", func() { _, err = io.ReadAll(resp.Body) })
	resp.Body.Close()
	require.Error(t, err)
	assert.ErrorContains(t, err, "500")
	assert.LessOrEqual(t, attempts.Load(), int32(maxRangeAttempts))
	assert.GreaterOrEqual(t, attempts.Load(), int32(2), "retried before giving up")
}

// twoDatagramDNS is a UDP DNS server on loopback that answers each query
// with the datagrams replies gives, one after the other.
func twoDatagramDNS(t *testing.T, replies func(q *dns.Msg) [][]byte) *fakeDNS {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &fakeDNS{addr: netip.MustParseAddrPort(pc.LocalAddr().String())}
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := new(dns.Msg)
			if q.Unpack(buf[:n]) != nil {
				continue
			}
			f.queries.Add(1)
			for _, b := range replies(q) {
				pc.WriteTo(b, from)
			}
		}
	})
	t.Cleanup(func() {
		pc.Close()
		wg.Wait()
	})
	return f
}

// A size a server states bounds nothing: Content-Lengths of 2^62 do not
// overflow a prediction into a negative one, nor stand in it unbounded.
func TestHostileSizesStayBounded(t *testing.T) {
	c := &sizeCache{max: 16}
	c.put(objectKey{"o", "/a"}, 1<<62)
	c.put(objectKey{"o", "/b"}, 1<<62)
	c.put(objectKey{"o", "/c"}, 1000)
	n, src := c.predict(objectKey{"o", "/new"})
	assert.Equal(t, sizeFromOrigin, src)
	assert.Positive(t, n, "no overflow")
	assert.LessOrEqual(t, n, int64(maxSizeEstimate), "bounded by our own setting")
	n, _ = c.predict(objectKey{"o", "/a"})
	assert.EqualValues(t, int64(maxSizeEstimate), n)
	c.put(objectKey{"p", "/a"}, 1<<62)
	n, src = c.predict(objectKey{"q", "/"})
	assert.Equal(t, sizeFromRecent, src, "an origin not heard from: every origin's median")
	assert.Positive(t, n, "no overflow")
	assert.LessOrEqual(t, n, int64(maxSizeEstimate), "every origin's sizes bounded as each one's")
}
