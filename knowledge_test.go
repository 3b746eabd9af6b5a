package intents

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/estimate"
)

// knowledgeManager is a Manager over loopback that keeps its knowledge in
// file, logging to log.
func knowledgeManager(t *testing.T, file string, log *bytes.Buffer, dns ...string) *Manager {
	t.Helper()
	empty := filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	m, err := NewManager(Config{Paths: []PathConfig{{Interface: loopbackName(t), DNS: dns}}, NoWatch: true, ResolvConf: empty, Knowledge: file,
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	require.NoError(t, err)
	return m
}

// sameEstimate is e less what says whether it stands on an earlier
// Manager's knowledge.
func sameEstimate(e Estimate) Estimate {
	e.Remembered, e.Age = false, 0
	return e
}

// What a Manager measured is there for the next one on the same network,
// whole (the same estimates), as remembered, from a file only its owner
// reads; a Manager on another network (other DNS servers) starts cold.
func TestKnowledgeOutlivesTheManager(t *testing.T) {
	file := filepath.Join(t.TempDir(), "cache", "paths.json")
	var log bytes.Buffer
	m := knowledgeManager(t, file, &log)
	lo := m.Paths()[0].Name
	cold := m.Path(lo).Estimate()
	assert.False(t, cold.Remembered, "nothing saved yet")
	assert.Zero(t, cold.RTT)
	est := m.Path(lo).est
	est.AddRTT(30 * time.Millisecond)
	est.AddRTT(20 * time.Millisecond)
	est.AddTransfer(100_000, 0, 400*time.Millisecond) // held back by the path: 2 Mbit/s shown
	est.AddDelivery(50_000, 100*time.Millisecond)
	est.AddLoss(2, 100)
	est.AddProbe(25 * time.Millisecond)
	warm := m.Path(lo).Estimate()
	require.NoError(t, m.Close())
	fi, err := os.Stat(file)
	require.NoError(t, err, "saved on Close")
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	dir, err := os.Stat(filepath.Dir(file))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), dir.Mode().Perm(), "a folder of its own, its owner's")

	m2 := knowledgeManager(t, file, &log)
	defer m2.Close()
	e := m2.Path(lo).Estimate()
	assert.True(t, e.Remembered)
	assert.Less(t, e.Age, time.Minute)
	assert.Equal(t, sameEstimate(warm), sameEstimate(e), "every estimate as the Manager before left it")

	m3 := knowledgeManager(t, file, &log, "192.0.2.53")
	defer m3.Close()
	assert.False(t, m3.Path(lo).Estimate().Remembered, "another network: other DNS servers")
	assert.Empty(t, log.String(), "nothing to warn of")
}

// goodState is a State a Path measured at now.
func goodState(now time.Time) estimate.State {
	p := estimate.New(0, 0)
	p.SetClock(func() time.Time { return now })
	p.AddRTT(20 * time.Millisecond)
	s, _ := p.State()
	return s
}

// A file that is not ours, or not whole, or says what no path measures, is
// no knowledge: one warning, no crash, and never a wrong value.
func TestKnowledgeIgnoresBadFiles(t *testing.T) {
	id := strings.Repeat("ab", 32)
	now := time.Now()
	good := goodState(now)
	file := func(v any) []byte {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return b
	}
	nets := func(id string, s estimate.State) map[string]estimate.State { return map[string]estimate.State{id: s} }
	withRTT := func(d time.Duration) estimate.State { s := good; s.SRTT = d; return s }
	cases := []struct {
		name    string
		content []byte
		warns   bool
	}{
		{"not JSON", []byte("\x00\x01garbage"), true},
		{"cut short", file(knowledgeFile{Version: knowledgeVersion, Networks: nets(id, good)})[:40], true},
		{"another version", file(knowledgeFile{Version: 99, Networks: nets(id, good)}), true},
		{"the version before", file(knowledgeFile{Version: 1, Networks: nets(id, good)}), true},
		{"too large", append([]byte(`{"version":2,"networks":{},"pad":"`), bytes.Repeat([]byte("x"), knowledgeMaxBytes)...), true},
		{"negative RTT", file(knowledgeFile{Version: knowledgeVersion, Networks: nets(id, withRTT(-time.Second))}), false},
		{"an hour's RTT", file(knowledgeFile{Version: knowledgeVersion, Networks: nets(id, withRTT(time.Hour))}), false},
		{"from the future", file(knowledgeFile{Version: knowledgeVersion, Networks: nets(id, goodState(now.Add(time.Hour)))}), false},
		{"older than a day", file(knowledgeFile{Version: knowledgeVersion, Networks: nets(id, goodState(now.Add(-knowledgeMaxAge-time.Minute)))}), false},
		{"a short id", file(knowledgeFile{Version: knowledgeVersion, Networks: nets("ab", good)}), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			name := filepath.Join(t.TempDir(), "paths.json")
			require.NoError(t, os.WriteFile(name, c.content, 0o600))
			var log bytes.Buffer
			k := loadKnowledge(name, slog.New(slog.NewTextHandler(&log, nil)))
			assert.Empty(t, k.networks, "nothing believed")
			if c.warns {
				assert.Equal(t, 1, strings.Count(log.String(), "\n"), "one line: %s", log.String())
				assert.Contains(t, log.String(), "ignoring")
			} else {
				assert.Empty(t, log.String(), "values out of bounds are dropped quietly")
			}
			// The next save replaces what could not be read.
			require.NoError(t, k.save(nets(id, good)))
			assert.Len(t, loadKnowledge(name, slog.New(slog.NewTextHandler(&log, nil))).networks, 1)
		})
	}
	// An unreadable file (a folder in its place) warns too.
	var log bytes.Buffer
	assert.Empty(t, loadKnowledge(t.TempDir(), slog.New(slog.NewTextHandler(&log, nil))).networks)
	assert.Contains(t, log.String(), "ignoring")
}

// Saving merges with what another process saved meanwhile (of a network,
// the one measured last wins), ages out what is over a day old, and keeps
// the file to its bound, the most recently learnt networks first.
func TestKnowledgeSaveMergesAndBounds(t *testing.T) {
	name := filepath.Join(t.TempDir(), "paths.json")
	now := time.Now()
	quiet := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	a, b := strings.Repeat("aa", 32), strings.Repeat("bb", 32)
	k1 := loadKnowledge(name, quiet)
	k2 := loadKnowledge(name, quiet)
	require.NoError(t, k1.save(map[string]estimate.State{a: goodState(now)}))
	require.NoError(t, k2.save(map[string]estimate.State{b: goodState(now)}))
	got := loadKnowledge(name, quiet)
	assert.Len(t, got.networks, 2, "the other process's network kept")

	// k2 learnt a newer state of a meanwhile: k1's older one does not
	// replace it.
	newer := goodState(now.Add(time.Second))
	require.NoError(t, k2.save(map[string]estimate.State{a: newer}))
	require.NoError(t, k1.save(nil))
	assert.Equal(t, newer.RTTAt.UnixNano(), loadKnowledge(name, quiet).networks[a].RTTAt.UnixNano())

	// Beyond the bound, the least recently learnt go.
	ls := map[string]estimate.State{}
	for i := range knowledgeMaxNetworks + 10 {
		ls[fmt.Sprintf("%064x", i+1)] = goodState(now.Add(-time.Duration(knowledgeMaxNetworks+10-i) * time.Second))
	}
	require.NoError(t, k1.save(ls))
	kept := loadKnowledge(name, quiet).networks
	assert.Len(t, kept, knowledgeMaxNetworks)
	assert.Contains(t, kept, a, "learnt now")
	assert.NotContains(t, kept, fmt.Sprintf("%064x", 1), "the oldest gone")

	// A day later, nothing is left.
	later := loadKnowledge(name, quiet)
	later.now = func() time.Time { return now.Add(knowledgeMaxAge + time.Hour) }
	kf, err := later.read()
	require.NoError(t, err)
	assert.Empty(t, kf.Networks)
}

// sizesTransport is a Transport of m whose size memory is in use.
func sizesTransport(t *testing.T, m *Manager) *Transport {
	tr := &Transport{Manager: m}
	tr.init()
	t.Cleanup(func() { tr.Close() })
	return tr
}

// learn has tr learn that the object at url is size bytes.
func learn(t *testing.T, tr *Transport, url string, size int64) {
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	tr.rememberSize(req.URL, size)
}

// sizesOf is what tr predicts for each of urls, and whether their
// origins' typical sizes are settled.
func sizesOf(t *testing.T, tr *Transport, urls []string) []string {
	var out []string
	for _, u := range urls {
		req, err := http.NewRequest("GET", u, nil)
		require.NoError(t, err)
		k, ok := tr.objectOf(req.URL)
		require.True(t, ok)
		n, src := tr.sizes.predict(k)
		out = append(out, fmt.Sprintf("%s: %d from %q, settled %v", u, n, src, tr.sizes.settled(k.origin)))
	}
	return out
}

// A Transport's memory of sizes is saved with its Manager's knowledge and
// restored whole in the next process's Transport: each URL's last size,
// each origin's and every origin's recent medians, whether they are
// settled, and which go first when the memory is full. The file names no
// origin or URL in clear: their IDs are hashes under a key of its own,
// so another file's IDs are not these.
func TestKnowledgeKeepsSizes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "paths.json")
	var log bytes.Buffer
	m := knowledgeManager(t, file, &log)
	tr := sizesTransport(t, m)
	var probe []string
	for i := range maxSizeOrigins + 5 { // past the bound: the first heard from are gone
		o := fmt.Sprintf("http://site%d.example", i)
		for j := range 3 {
			learn(t, tr, fmt.Sprintf("%s/obj/%d", o, j), int64(1000*(i+1)+j))
		}
		probe = append(probe, o+"/obj/1", o+"/new")
	}
	for i := range 4200 { // past the URLs kept
		learn(t, tr, fmt.Sprintf("http://many.example/%d", i), int64(i))
	}
	probe = append(probe, "http://many.example/1", "http://many.example/4199", "http://unheard.example/")
	want := sizesOf(t, tr, probe)
	require.NoError(t, tr.Close())
	require.NoError(t, m.Close())

	b, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "example", "no origin in clear")
	assert.NotContains(t, string(b), "obj")
	assert.Less(t, len(b), knowledgeMaxBytes/2, "a file at every bound is well within what is read")

	m2 := knowledgeManager(t, file, &log)
	defer m2.Close()
	tr2 := sizesTransport(t, m2)
	assert.Equal(t, want, sizesOf(t, tr2, probe), "every prediction as the Transport before made it")
	learn(t, tr2, "http://site300.example/x", 5)
	learn(t, tr, "http://site300.example/x", 5)
	assert.Equal(t, sizesOf(t, tr, probe), sizesOf(t, tr2, probe), "and the next sizes change them alike")

	// Another file, another key.
	other := filepath.Join(t.TempDir(), "paths.json")
	m3 := knowledgeManager(t, other, &log)
	tr3 := sizesTransport(t, m3)
	learn(t, tr3, "http://site1.example/obj/1", 2001)
	require.NoError(t, tr3.Close())
	require.NoError(t, m3.Close())
	var f1, f2 knowledgeFile
	b2, err := os.ReadFile(other)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &f1))
	require.NoError(t, json.Unmarshal(b2, &f2))
	assert.NotEqual(t, f1.Key, f2.Key)
	assert.NotContains(t, string(b), hex.EncodeToString(f2.Sizes.URLs[0].ID[:]), "the same URL has another ID")
	assert.Empty(t, log.String())
}

// Sizes are saved whichever ends first, the Transport or its Manager, and
// from a Transport that was dropped without Close.
func TestKnowledgeSizesWhateverEndsFirst(t *testing.T) {
	for _, order := range []string{"transport first", "manager first"} {
		t.Run(order, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "paths.json")
			var log bytes.Buffer
			m := knowledgeManager(t, file, &log)
			tr := sizesTransport(t, m)
			learn(t, tr, "http://a.example/x", 1234)
			if order == "transport first" {
				require.NoError(t, tr.Close())
				require.NoError(t, m.Close())
			} else {
				require.NoError(t, m.Close())
				require.NoError(t, tr.Close())
			}
			m2 := knowledgeManager(t, file, &log)
			defer m2.Close()
			assert.Equal(t, []string{`http://a.example/x: 1234 from "url", settled false`}, sizesOf(t, sizesTransport(t, m2), []string{"http://a.example/x"}))
		})
	}
}

// A corrupt sizes part costs the sizes, not the paths' estimates; sizes
// under another key than the file's are not believed.
func TestKnowledgeIgnoresBadSizes(t *testing.T) {
	now := time.Now()
	id := strings.Repeat("ab", 32)
	key := strings.Repeat("cd", 32)
	url := sizeID{1}
	for name, c := range map[string]struct {
		key   string
		sizes *savedSizes
		kept  int
	}{
		"good":             {key, &savedSizes{At: now, URLs: []savedSize{{url, 10}}}, 1},
		"no key":           {"", &savedSizes{At: now, URLs: []savedSize{{url, 10}}}, 0},
		"a short key":      {"cd", &savedSizes{At: now, URLs: []savedSize{{url, 10}}}, 0},
		"a day old":        {key, &savedSizes{At: now.Add(-knowledgeMaxAge - time.Minute), URLs: []savedSize{{url, 10}}}, 0},
		"a negative size":  {key, &savedSizes{At: now, URLs: []savedSize{{url, -1}}}, 0},
		"a size over 1 TB": {key, &savedSizes{At: now, URLs: []savedSize{{url, maxSizeEstimate + 1}}}, 0},
		"twice":            {key, &savedSizes{At: now, URLs: []savedSize{{url, 10}, {url, 20}}}, 1},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "paths.json")
			b, err := json.Marshal(knowledgeFile{Version: knowledgeVersion, Networks: map[string]estimate.State{id: goodState(now)}, Key: c.key, Sizes: c.sizes})
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(file, b, 0o600))
			var log bytes.Buffer
			k := loadKnowledge(file, slog.New(slog.NewTextHandler(&log, nil)))
			assert.Len(t, k.networks, 1, "the estimates stand")
			kept := 0
			if k.sizes.latest != nil {
				kept = len(k.sizes.latest.URLs)
			}
			assert.Equal(t, c.kept, kept)
			assert.Empty(t, log.String())
		})
	}
	var bad sizeID
	assert.Error(t, json.Unmarshal([]byte(`"abc"`), &bad), "an ID of another length")
	assert.Error(t, json.Unmarshal([]byte(`"zz`+strings.Repeat("0", 30)+`"`), &bad), "not hex")
}

// racerOf is a Racer that races whenever asked, choosing every path.
func racerOf() Policy {
	return racer{PolicyFunc(func(req *Request, d *Decision) {
		for _, p := range req.Paths {
			d.Choices = append(d.Choices, Choice{Path: p})
		}
	})}
}

// A process whose Transport raced a first request does not race again;
// nor does one started from its knowledge, which a race's RTTs alone
// (no capacity shown: the root was too small to time) would not tell.
func TestKnowledgeRaceRunOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "paths.json")
	quiet := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	pair := func() (*Manager, *Transport) {
		m, err := NewManager(Config{Paths: []PathConfig{{Interface: loopbackName(t)}}, Policy: racerOf(), NoWatch: true, Knowledge: file, Logger: quiet})
		require.NoError(t, err)
		paths := []*Path{fakePath("a", "10.9.0.1"), fakePath("b", "10.9.1.1")}
		for _, p := range paths {
			p.est = m.estimatorOf(p)
		}
		m.paths.Store(&paths)
		return m, &Transport{Manager: m}
	}
	get, err := http.NewRequest("GET", "http://192.0.2.1/", nil)
	require.NoError(t, err)
	m, tr := pair()
	_, _, ok := tr.firstRacePaths(get, &Intents{})
	require.True(t, ok, "a first request, nothing known")
	for _, p := range m.Paths() {
		p.est.AddRTT(20 * time.Millisecond)
	}
	_, _, ok = tr.firstRacePaths(get, &Intents{})
	assert.False(t, ok, "raced once")
	require.NoError(t, tr.Close())
	require.NoError(t, m.Close())

	m2, tr2 := pair()
	defer m2.Close()
	defer tr2.Close()
	assert.Zero(t, m2.Path("a").Estimate().Bandwidth, "no capacity known")
	_, _, ok = tr2.firstRacePaths(get, &Intents{})
	assert.False(t, ok, "restarted, it does not race either")
}

// A Transport's HTTP/3 alternatives, and where HTTP/3 failed (with the
// backoff its next failure doubles), are saved with its Manager's
// knowledge and restored in the next process's Transport on the same
// network: it asks for HTTP/3 where, and when, the one before would have.
func TestKnowledgeKeepsAltSvc(t *testing.T) {
	file := filepath.Join(t.TempDir(), "paths.json")
	var log bytes.Buffer
	m := knowledgeManager(t, file, &log)
	lo := m.Paths()[0].Name
	tr := sizesTransport(t, m)
	now := time.Now()
	a, b := "https://a.example:443", "https://b.example:443"
	tr.altSvc.learn(a, "a.example", []string{`h3=":8443"; ma=3600`}, now)
	tr.altSvc.markBroken(b, lo, now)
	tr.altSvc.markBroken(b, lo, now) // a second failure: twice as long
	require.NoError(t, tr.Close())
	require.NoError(t, m.Close())
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "example", "no origin in clear")

	m2 := knowledgeManager(t, file, &log)
	defer m2.Close()
	tr2 := sizesTransport(t, m2)
	lookups := func(tr *Transport) []string {
		var out []string
		for _, at := range []time.Duration{0, 2*brokenHTTP3 + time.Second, 4*brokenHTTP3 + time.Second, 2 * time.Hour} {
			for _, o := range []string{a, b} {
				port, ok := tr.altSvc.lookup(o, lo, 443, true, now.Add(at))
				out = append(out, fmt.Sprintf("%s at +%v: %d %v", o, at, port, ok))
			}
		}
		return out
	}
	assert.Equal(t, lookups(tr), lookups(tr2))
	for _, c := range []*Transport{tr, tr2} {
		c.altSvc.markBroken(b, lo, now)
	}
	assert.Equal(t, lookups(tr), lookups(tr2), "a third failure: four times as long, in both")
	assert.Empty(t, log.String())
}

// A file at every bound (networks, URLs, origins, tunnels' hosts, HTTP/3
// alternatives) is read back whole, and is well within what is read.
func TestKnowledgeFileAtItsBounds(t *testing.T) {
	now := time.Now()
	id := func(kind string, i int) (out sizeID) {
		copy(out[:], fmt.Sprintf("%s%015d", kind, i))
		return out
	}
	p := estimate.New(0, 0)
	p.SetClock(func() time.Time { return now })
	for i := range 20 {
		p.AddRTT(time.Duration(20+i) * time.Millisecond)
		p.AddProbe(time.Duration(21+i) * time.Millisecond)
		p.AddTransfer(100_000, 300_000, time.Duration(100+i)*time.Millisecond)
		p.AddLoss(1, 100)
	}
	p.MarkRaced()
	state, ok := p.State()
	require.True(t, ok)
	kf := knowledgeFile{Version: knowledgeVersion, Networks: map[string]estimate.State{}, Key: strings.Repeat("ab", 32),
		Sizes: &savedSizes{At: now}, Tunnels: &savedHosts{At: now}, AltSvc: &savedAltSvc{At: now}}
	for i := range knowledgeMaxNetworks {
		kf.Networks[fmt.Sprintf("%064x", i)] = state
	}
	for i := range knowledgeMaxURLs {
		kf.Sizes.URLs = append(kf.Sizes.URLs, savedSize{id("u", i), 1 << 30})
	}
	many := func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = 1<<30 + int64(i)
		}
		return out
	}
	for i := range maxSizeOrigins {
		kf.Sizes.Origins = append(kf.Sizes.Origins, savedOrigin{id("o", i), many(originSamples)})
	}
	kf.Sizes.Recent = many(originSamples)
	for i := range knowledgeMaxHosts {
		kf.Tunnels.Hosts = append(kf.Tunnels.Hosts, savedOrigin{id("h", i), many(5)})
	}
	for i := range maxOrigins {
		kf.AltSvc.Alts = append(kf.AltSvc.Alts, savedAlt{id("a", i), 8443, now.Add(time.Hour)})
		kf.AltSvc.Broken = append(kf.AltSvc.Broken, savedBroken{id("b", i), strings.Repeat("cd", 32), now.Add(time.Hour), maxBrokenHTTP3})
	}
	b, err := json.Marshal(kf)
	require.NoError(t, err)
	t.Logf("a file at every bound: %d bytes", len(b))
	assert.Less(t, len(b), knowledgeMaxBytes/2)
	file := filepath.Join(t.TempDir(), "paths.json")
	require.NoError(t, os.WriteFile(file, b, 0o600))
	k := loadKnowledge(file, slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)))
	assert.Len(t, k.networks, knowledgeMaxNetworks)
	assert.Len(t, k.sizes.latest.URLs, knowledgeMaxURLs)
	assert.Len(t, k.sizes.latest.Origins, maxSizeOrigins)
	assert.Len(t, k.hosts.latest.Hosts, knowledgeMaxHosts)
	assert.Len(t, k.alts.latest.Alts, maxOrigins)
	assert.Len(t, k.alts.latest.Broken, maxOrigins)
}

// Every part of a network's identity tells it apart: its interface, its
// type, its address prefixes, its DNS servers.
func TestNetworkIDOfEveryPart(t *testing.T) {
	base := func() *Path {
		return &Path{Name: "wlan0", Type: TypeWifi, prefixes: []netip.Prefix{netip.MustParsePrefix("192.0.2.7/24")},
			DNS: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:53")}}
	}
	id := networkID(base())
	for name, change := range map[string]func(p *Path){
		"interface": func(p *Path) { p.Name = "wlan1" },
		"type":      func(p *Path) { p.Type = TypeCellular },
		"prefixes":  func(p *Path) { p.prefixes = []netip.Prefix{netip.MustParsePrefix("198.51.100.7/24")} },
		"DNS":       func(p *Path) { p.DNS = []netip.AddrPort{netip.MustParseAddrPort("198.51.100.1:53")} },
	} {
		p := base()
		change(p)
		assert.NotEqual(t, id, networkID(p), name)
	}
	renewed := base()
	renewed.prefixes = []netip.Prefix{netip.MustParsePrefix("192.0.2.99/24")}
	assert.Equal(t, id, networkID(renewed), "a new lease in the same prefix is the same network")
}
