package intents_test

// A real nginx behind the two-path testbed: HTTP/1.1 in the clear and
// HTTP/2 over TLS (a CA the test makes), keepalive_requests 5 (so it ends
// connections, HTTP/2 ones with a graceful GOAWAY, every five requests),
// keepalive_timeout 1s, static files with ranges. The client side runs in
// the client namespace (TestNetnsNginxChild); the parent reads nginx's
// access log to check that every request came from the address of the
// path the library reported for it.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
	"github.com/sockintents/intents/policy"
)

// nginxObjects are the page's objects: obj0 … obj32, of these sizes in
// turn, and big (4 MB, for ranges).
var nginxSizes = []int64{1_000, 10_000, 50_000, 100_000}

const (
	nginxObjects = 33
	nginxBig     = 4_000_000
)

func nginxObjectSize(i int) int64 { return nginxSizes[i%len(nginxSizes)] + int64(i) }

// startNginx writes the page's objects into dir/www and starts nginx on
// host in the server namespace (see testbed.StartNginx).
func startNginx(t *testing.T, tb *testbed.Testbed, dir string, host netip.Addr, ca *testbed.CA) {
	www := filepath.Join(dir, "www")
	require.NoError(t, os.MkdirAll(www, 0o755))
	write := func(name string, size int64) {
		f, err := os.Create(filepath.Join(www, name))
		require.NoError(t, err)
		_, err = io.Copy(f, io.LimitReader(testbed.NewObject(size), size))
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	for i := range nginxObjects {
		write(fmt.Sprintf("obj%d", i), nginxObjectSize(i))
	}
	write("big", nginxBig)
	testbed.StartNginx(t, tb, dir, host, ca)
}

func TestNetnsNginx(t *testing.T) {
	testbed.RequireRoot(t)
	if _, err := osexec.LookPath("nginx"); err != nil {
		t.Skip("needs nginx (apt-get install nginx; .ci/run installs it)")
	}
	tb := testbed.New(t, testbed.Spec{Paths: []testbed.PathSpec{testbed.Symmetric(10*time.Millisecond, 40e6), testbed.Symmetric(10*time.Millisecond, 40e6)}, Servers: 1})
	dir := t.TempDir()
	ca, err := testbed.NewCA(tb.Hosts[0])
	require.NoError(t, err)
	startNginx(t, tb, dir, tb.Hosts[0], ca)
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			testbed.RunTest(t, tb.Client, "TestNetnsNginxChild", scheme+" "+dir)
			checkNginxLog(t, dir, scheme)
		})
	}
}

// clientRecord is one request as the client saw it: its id, the path the
// library reported and that path's address.
type clientRecord struct {
	id, path, addr string
}

// checkNginxLog checks every request the child recorded against nginx's
// access log: it arrived, from the address of the path reported, and was
// answered 200 (206 for ranges); the burst that required path 1 came from
// path 1's address alone, and the aggregated download's ranges from both
// paths'.
func checkNginxLog(t *testing.T, dir, scheme string) {
	recs, err := os.ReadFile(filepath.Join(dir, scheme+".records"))
	require.NoError(t, err)
	want := map[string]clientRecord{}
	for _, line := range strings.Split(strings.TrimSpace(string(recs)), "\n") {
		f := strings.Fields(line)
		require.Len(t, f, 3, line)
		want[f[0]] = clientRecord{f[0], f[1], f[2]}
	}
	logFile, err := os.Open(filepath.Join(dir, "access.log"))
	require.NoError(t, err)
	defer logFile.Close()
	from := map[string][]string{} // request id → the client addresses nginx saw it from
	perConn := map[string]int{}
	paths := map[string]int{}
	rangesFrom := map[string]int{}
	sc := bufio.NewScanner(logFile)
	for sc.Scan() {
		// remote server connection requests protocol status uri
		f := strings.Fields(sc.Text())
		if len(f) != 7 {
			continue
		}
		u := f[6]
		_, id, ok := strings.Cut(u, "id="+scheme+"-")
		if !ok {
			continue
		}
		if _, ok := want[id]; !ok {
			rangesFrom[f[0]]++ // a range of the aggregated download
			continue
		}
		from[id] = append(from[id], f[0])
		assert.Contains(t, []string{"200", "206"}, f[5], "request %s", id)
		perConn[f[2]] = max(perConn[f[2]], atoi(f[3]))
		paths[f[0]]++
	}
	require.NoError(t, sc.Err())
	moved := 0
	for id, rec := range want {
		// A response far larger than the request was placed for moves
		// to a path that delivers it sooner, and is asked for there again:
		// the server saw it from both, the last from the path reported.
		assert.Contains(t, from[id], rec.addr, "request %s: nginx saw it from %v, the library reported %s (%s)", id, from[id], rec.path, rec.addr)
		if len(from[id]) > 1 {
			moved++
		}
		if strings.HasPrefix(id, "burst-") {
			for _, a := range from[id] {
				assert.Equal(t, "10.71.1.1", a, "request %s required path 1", id)
			}
		}
	}
	t.Logf("%s: %d requests asked for again on another path (moved)", scheme, moved)
	most := 0
	for _, n := range perConn {
		most = max(most, n)
	}
	t.Logf("%s: %d requests recorded, over %d connections (at most %d requests on one: keepalive_requests 5), by client address %v",
		scheme, len(want), len(perConn), most, paths)
	assert.LessOrEqual(t, most, 5)
	assert.Len(t, paths, 2, "both paths carried requests")
	t.Logf("%s: the aggregated download's ranges by client address %v", scheme, rangesFrom)
	assert.Positive(t, rangesFrom["10.71.1.1"], "path 1 carried ranges")
	assert.Positive(t, rangesFrom["10.71.2.1"], "path 2 carried ranges")
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func TestNetnsNginxChild(t *testing.T) {
	arg := testbed.ChildArg(t, "TestNetnsNginx")
	scheme, dir, _ := strings.Cut(arg, " ")
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	m, err := intents.NewManager(intents.Config{Paths: []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}},
		Policy: &policy.RoundRobin{}, NoWatch: true})
	require.NoError(t, err)
	defer m.Close()
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.TLSClientConfig = &tls.Config{RootCAs: pool}
	tr := &intents.Transport{Manager: m, Base: base}
	defer tr.Close()
	origin := scheme + "://10.71.100.1"

	var mu sync.Mutex
	var records []string
	var protos sync.Map
	fetch := func(name, id string, in intents.Intents, size int64) error {
		var path *intents.Path
		ctx := httptrace.WithClientTrace(intents.WithIntents(context.Background(), in), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) { path, _ = intents.PathOf(i.Conn) }})
		req, _ := http.NewRequestWithContext(ctx, "GET", origin+"/"+name+"?id="+scheme+"-"+id, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		defer resp.Body.Close()
		h := sha256.New()
		n, err := io.Copy(h, resp.Body)
		if err != nil {
			return fmt.Errorf("%s: body: %w", id, err)
		}
		if resp.StatusCode != 200 || n != size || [32]byte(h.Sum(nil)) != testbed.ObjectSum(size) {
			return fmt.Errorf("%s: %s, %d bytes, checksum equal %v", id, resp.Status, n, [32]byte(h.Sum(nil)) == testbed.ObjectSum(size))
		}
		protos.Store(resp.Proto, true)
		if path == nil {
			return fmt.Errorf("%s: no path reported", id)
		}
		addr, _ := path.Addr(netip.MustParseAddr("10.71.100.1"))
		mu.Lock()
		records = append(records, fmt.Sprintf("%s %s %s", id, path.Name, addr))
		mu.Unlock()
		return nil
	}
	run := func(n int, f func(i int) error) {
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { errs <- f(i) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			assert.NoError(t, err)
		}
	}
	// A page: the root, then 32 objects at once, over both paths.
	require.NoError(t, fetch("obj0", "page-0", intents.Intents{}, nginxObjectSize(0)))
	run(nginxObjects-1, func(i int) error {
		return fetch(fmt.Sprintf("obj%d", i+1), fmt.Sprintf("page-%d", i+1), intents.Intents{}, nginxObjectSize(i+1))
	})
	// A burst of 20 on path 1 alone.
	p1 := intents.Intents{Interfaces: map[string]intents.Level{"p1": intents.LevelRequire}}
	run(20, func(i int) error { return fetch("obj3", fmt.Sprintf("burst-%d", i), p1, nginxObjectSize(3)) })
	// Ranges of a static file over both paths (Aggregate), byte-exact. A
	// path gets ranges of half a second of its rate up to 16 × MinChunk:
	// small chunks, so that a path with two in flight leaves the next to
	// the other even on links as fast as these.
	agg := &intents.Transport{Manager: m, Base: base, Aggregate: &intents.Aggregate{MinSize: 1, MinChunk: 16 << 10}}
	defer agg.Close()
	req, _ := http.NewRequest("GET", origin+"/big?id="+scheme+"-range", nil)
	resp, err := agg.RoundTrip(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, testbed.ObjectSum(nginxBig), sha256.Sum256(body), "the aggregated download is the file")
	// The aggregated download is agg's only one: its statistics are the
	// download's. Two equal paths: each carries a fair share.
	per := agg.Stats()
	t.Logf("aggregated download by path: p1 %d, p2 %d bytes", per["p1"].BytesReceived, per["p2"].BytesReceived)
	assert.GreaterOrEqual(t, per["p1"].BytesReceived, int64(nginxBig/4), "path 1's share")
	assert.GreaterOrEqual(t, per["p2"].BytesReceived, int64(nginxBig/4), "path 2's share")

	wantProto := map[string]string{"http": "HTTP/1.1", "https": "HTTP/2.0"}[scheme]
	_, ok := protos.Load(wantProto)
	assert.True(t, ok, "spoke %s", wantProto)
	t.Logf("%d requests, stats %+v", len(records), tr.Stats())
	require.NoError(t, os.WriteFile(filepath.Join(dir, scheme+".records"), []byte(strings.Join(records, "\n")+"\n"), 0o600))
}
