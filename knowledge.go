package intents

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sockintents/intents/internal/estimate"
	"github.com/sockintents/intents/internal/hostsizes"
	"github.com/sockintents/intents/internal/sizes"
)

// A Manager with Config.Knowledge keeps in a file everything its
// decisions stand on that outlives a page, so that a process started
// again decides as the one before would have: each path's estimates
// whole (the filters behind them, not only their values: see
// estimate.State), by network; its Transports' memories of response
// sizes (each URL's last, each origin's recent ones, every origin's) and
// of HTTP/3 alternatives; a proxy's of its tunnels' sizes. Origins, URLs
// and hosts are named by hashes under the file's own random key. A
// restarted process that decided otherwise would be missing something
// from the file.

// Knowledge limits: what a Manager keeps between processes.
const (
	// knowledgeMaxAge is how long what was learnt is kept: a network's
	// estimates (each part by when it was last measured) and the sizes
	// (by when one was last learnt) older than that are dropped when
	// read.
	knowledgeMaxAge = 24 * time.Hour
	// knowledgeMaxNetworks bounds the file: the networks least recently
	// learnt are dropped beyond it.
	knowledgeMaxNetworks = 256
	// knowledgeMaxURLs bounds the URLs whose sizes are saved: the last
	// stored (a Transport's MaxSizeHints may keep more).
	knowledgeMaxURLs = 4096
	// knowledgeMaxHosts bounds the hosts whose tunnels' sizes are saved:
	// the last heard from.
	knowledgeMaxHosts = 4096
	// knowledgeMaxBytes bounds what is read: a larger file is not ours.
	// A file at every bound above is about a quarter of it.
	knowledgeMaxBytes = 4 << 20
	// knowledgeSaveEvery is how often a Manager saves while it runs, so a
	// process that is killed loses a minute at most.
	knowledgeSaveEvery = time.Minute
	knowledgeVersion   = 2
)

// DefaultKnowledgeFile is where the intents command keeps what its
// Managers learnt of the networks they ran on: paths.json in the user's
// cache directory (os.UserCacheDir), under intents.
func DefaultKnowledgeFile() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "intents", "paths.json"), nil
}

// knowledgeFile is the file's form.
type knowledgeFile struct {
	Version int `json:"version"`
	// Networks are the paths' estimates by network (see networkID).
	Networks map[string]estimate.State `json:"networks"`
	// Key keys the hashes that name origins, URLs and hosts below (hex).
	Key   string      `json:"key,omitempty"`
	Sizes *savedSizes `json:"sizes,omitempty"`
	// Tunnels are what a proxy's tunnels received, by host.
	Tunnels *savedHosts `json:"tunnels,omitempty"`
	// AltSvc are the HTTP/3 alternatives the origins advertised, and
	// where HTTP/3 failed.
	AltSvc *savedAltSvc `json:"alt_svc,omitempty"`
}

// savedSizes is a sizeCache's memory: a restored one gives the same
// predictions, and goes on from them as the one saved would.
type savedSizes struct {
	// At is when a size was last learnt.
	At time.Time `json:"at"`
	// URLs are the objects' last sizes, the first stored first.
	URLs []savedSize `json:"urls,omitempty"`
	// Origins are each origin's recent sizes (oldest first), the origin
	// first heard from first.
	Origins []savedOrigin `json:"origins,omitempty"`
	// Recent are every origin's recent sizes, oldest first.
	Recent []int64 `json:"recent,omitempty"`
}

// savedHosts is a hostMemory's: each host's last tunnels' sizes (oldest
// first), the host first heard from first.
type savedHosts struct {
	At    time.Time     `json:"at"`
	Hosts []savedOrigin `json:"hosts,omitempty"`
}

// savedAltSvc is a Transport's altSvcCache: each origin's HTTP/3
// alternative and until when, and where HTTP/3 failed lately (by the
// network of the path, see networkID), with the backoff of its next
// failure.
type savedAltSvc struct {
	At     time.Time     `json:"at"`
	Alts   []savedAlt    `json:"alts,omitempty"`
	Broken []savedBroken `json:"broken,omitempty"`
}

type savedAlt struct {
	ID      sizeID    `json:"id"`
	Port    uint16    `json:"port"`
	Expires time.Time `json:"expires"`
}

type savedBroken struct {
	ID      sizeID        `json:"id"`
	Network string        `json:"network"`
	Until   time.Time     `json:"until"`
	Backoff time.Duration `json:"backoff_ns"`
}

func (s *savedSizes) learntAt() time.Time  { return s.At }
func (h *savedHosts) learntAt() time.Time  { return h.At }
func (a *savedAltSvc) learntAt() time.Time { return a.At }

type savedSize struct {
	ID   sizeID `json:"id"`
	Size int64  `json:"n"`
}

type savedOrigin struct {
	ID    sizeID  `json:"id"`
	Sizes []int64 `json:"n"`
}

// MarshalText writes an ID as hex.
func (id sizeID) MarshalText() ([]byte, error) { return hex.AppendEncode(nil, id[:]), nil }

// UnmarshalText reads an ID written by MarshalText.
func (id *sizeID) UnmarshalText(b []byte) error {
	if hex.DecodedLen(len(b)) != len(id) {
		return errors.New("a size ID is 32 hex digits")
	}
	_, err := hex.Decode(id[:], b)
	return err
}

// check returns s less what could not be a sizeCache's (sizes out of
// bounds, IDs twice, more than it keeps: maxOrigins origins), and
// whether it is young enough to use at now.
func (s *savedSizes) check(now time.Time, maxOrigins int) (*savedSizes, bool) {
	if s == nil || s.At.IsZero() || s.At.After(now.Add(time.Minute)) || now.Sub(s.At) > knowledgeMaxAge {
		return nil, false
	}
	size := func(n int64) bool { return n >= 0 && n <= maxSizeEstimate }
	out := &savedSizes{At: s.At}
	seen := map[sizeID]bool{}
	for _, u := range s.URLs[max(len(s.URLs)-knowledgeMaxURLs, 0):] {
		if size(u.Size) && !seen[u.ID] {
			seen[u.ID] = true
			out.URLs = append(out.URLs, u)
		}
	}
	clear(seen)
	for _, o := range s.Origins[max(len(s.Origins)-maxOrigins, 0):] {
		if !seen[o.ID] && len(o.Sizes) > 0 && len(o.Sizes) <= originSamples && !slices.ContainsFunc(o.Sizes, func(n int64) bool { return !size(n) }) {
			seen[o.ID] = true
			out.Origins = append(out.Origins, o)
		}
	}
	if len(s.Recent) <= originSamples && !slices.ContainsFunc(s.Recent, func(n int64) bool { return !size(n) }) {
		out.Recent = s.Recent
	}
	return out, true
}

// check returns h less what could not be a hostMemory's, and whether it
// is young enough to use at now.
func (h *savedHosts) check(now time.Time) (*savedHosts, bool) {
	if h == nil {
		return nil, false
	}
	s, ok := (&savedSizes{At: h.At, Origins: h.Hosts}).check(now, knowledgeMaxHosts)
	if !ok {
		return nil, false
	}
	return &savedHosts{At: s.At, Hosts: s.Origins}, true
}

// check returns a less what could not be an altSvcCache's (no port, an
// expiry past maxAltSvcAge, a backoff out of its bounds, IDs twice, past
// its bound), and whether it is young enough to use at now.
func (a *savedAltSvc) check(now time.Time) (*savedAltSvc, bool) {
	if a == nil || a.At.IsZero() || a.At.After(now.Add(time.Minute)) || now.Sub(a.At) > knowledgeMaxAge {
		return nil, false
	}
	out := &savedAltSvc{At: a.At}
	seen := map[sizeID]bool{}
	for _, alt := range a.Alts[max(len(a.Alts)-maxOrigins, 0):] {
		if alt.Port != 0 && alt.Expires.After(now) && !alt.Expires.After(now.Add(maxAltSvcAge+time.Minute)) && !seen[alt.ID] {
			seen[alt.ID] = true
			out.Alts = append(out.Alts, alt)
		}
	}
	type bk struct {
		id  sizeID
		net string
	}
	seenBroken := map[bk]bool{}
	for _, b := range a.Broken[max(len(a.Broken)-maxOrigins, 0):] {
		k := bk{b.ID, b.Network}
		if len(b.Network) == 2*sha256.Size && b.Backoff >= brokenHTTP3 && b.Backoff <= maxBrokenHTTP3 &&
			!b.Until.After(now.Add(b.Backoff+time.Minute)) && now.Sub(b.Until) <= knowledgeMaxAge && !seenBroken[k] {
			seenBroken[k] = true
			out.Broken = append(out.Broken, b)
		}
	}
	return out, true
}

// saved returns what c holds, for the file, its paths named by their
// networks (networkOf; "": a path no longer known, left out); nil if it
// never learnt anything.
func (c *altSvcCache) saved(networkOf func(path string) string) *savedAltSvc {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		return nil
	}
	s := &savedAltSvc{At: c.at}
	for id, a := range c.alts {
		s.Alts = append(s.Alts, savedAlt{id, a.port, a.expires})
	}
	for k, b := range c.broken {
		if n := networkOf(k.path); n != "" {
			s.Broken = append(s.Broken, savedBroken{k.origin, n, b.until, b.d})
		}
	}
	return s
}

// restore sets c to what a holds (checked), its networks' paths named by
// pathOf ("": no path of the Manager is on it now, left out).
func (c *altSvcCache) restore(a *savedAltSvc, pathOf func(network string) string) {
	if a == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.alts, c.broken = map[sizeID]altSvc{}, map[brokenKey]brokenFor{}
	for _, alt := range a.Alts {
		c.alts[alt.ID] = altSvc{alt.Port, alt.Expires}
	}
	for _, b := range a.Broken {
		if p := pathOf(b.Network); p != "" {
			c.broken[brokenKey{b.ID, p}] = brokenFor{b.Until, b.Backoff}
		}
	}
	c.at = a.At
}

// saved returns what c holds, for the file; nil if it never learnt a size.
func (c *sizeCache) saved() *savedSizes {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		return nil
	}
	s := &savedSizes{At: c.at, Recent: c.recent.Sizes()}
	for _, id := range c.order[max(len(c.order)-knowledgeMaxURLs, 0):] {
		s.URLs = append(s.URLs, savedSize{id, c.sizes[id]})
	}
	for id, r := range c.origins.All() {
		s.Origins = append(s.Origins, savedOrigin{id, r.Sizes()})
	}
	return s
}

// restore sets c to what s holds (checked), as the sizeCache it was
// saved from was: its IDs are of the same key.
func (c *sizeCache) restore(s *savedSizes) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s == nil || c.max <= 0 {
		return
	}
	c.sizes, c.order, c.origins = nil, nil, nil
	c.initLocked()
	for _, u := range s.URLs {
		c.storeLocked(u.ID, u.Size)
	}
	for _, o := range s.Origins {
		for _, n := range o.Sizes {
			c.origins.Add(o.ID, n)
		}
	}
	for _, n := range s.Recent {
		c.recent.Add(n)
	}
	c.at = s.At
}

// knowledge is a Manager's store of what it and earlier Managers learnt,
// kept in a file.
type knowledge struct {
	file   string
	logger *slog.Logger
	now    func() time.Time

	saveMu sync.Mutex // orders the saves, each of which reads and writes the file

	mu       sync.Mutex // guards what follows; never held for I/O
	networks map[string]estimate.State
	key      [32]byte
	sizes    kept[*savedSizes]  // the Transports'
	alts     kept[*savedAltSvc] // the Transports'
	hosts    kept[*savedHosts]  // the proxies' tunnels'
	closed   bool               // the Manager closed: a memory that ends saves what it leaves
}

// learnt is a memory's saved form (a pointer: nil when it learnt
// nothing), and when it last learnt.
type learnt interface {
	comparable
	learntAt() time.Time
}

// holder is a live memory: what it holds now, to save.
type holder[S learnt] interface{ saved() S }

// kept is what a knowledge keeps of one kind of memory (a Transport's
// sizes or HTTP/3 alternatives, a proxy's tunnels): the live ones, and
// the latest that was read or that one which ended left. Of several, the
// one that learnt last is what is saved, and what a new one starts from.
// Guarded by knowledge.mu.
type kept[S learnt] struct {
	latest S
	live   map[holder[S]]bool
}

// keep makes s the latest if it learnt later.
func (kp *kept[S]) keep(s S) {
	var none S
	if s != none && (kp.latest == none || s.learntAt().After(kp.latest.learntAt())) {
		kp.latest = s
	}
}

// collect returns what kp's live memories hold now. Not under k.mu: a
// memory takes its own lock.
func collect[S learnt](k *knowledge, kp *kept[S]) []S {
	k.mu.Lock()
	live := slices.Collect(maps.Keys(kp.live))
	k.mu.Unlock()
	out := make([]S, 0, len(live))
	for _, h := range live {
		out = append(out, h.saved())
	}
	return out
}

// attach has h saved with the knowledge from now on, and returns what
// it starts from: what its kind learnt last, in this process (another
// Transport of the Manager's) or before it (the file). A memory made
// while the process runs so starts as one made in a process started
// again.
func attach[S learnt](k *knowledge, kp *kept[S], h holder[S]) S {
	now := collect(k, kp)
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range now {
		kp.keep(s)
	}
	if kp.live == nil {
		kp.live = map[holder[S]]bool{}
	}
	kp.live[h] = true
	return kp.latest
}

// detach ends h's saving with the knowledge, keeping what it learnt (its
// Transport or proxy ended); once the Manager has closed, that is saved
// now. Detaching twice (a Transport closed, then collected) does nothing.
func detach[S learnt](k *knowledge, kp *kept[S], h holder[S]) {
	s := h.saved()
	k.mu.Lock()
	if !kp.live[h] {
		k.mu.Unlock()
		return
	}
	delete(kp.live, h)
	kp.keep(s)
	closed := k.closed
	k.mu.Unlock()
	if closed {
		k.saveOrWarn(nil)
	}
}

// loadKnowledge reads file. A missing file is no knowledge; a corrupt,
// foreign or unreadable one is no knowledge too, said once on logger.
func loadKnowledge(file string, logger *slog.Logger) *knowledge {
	k := &knowledge{file: file, logger: logger, now: time.Now}
	kf, err := k.read()
	if err != nil {
		k.logger.Warn("intents: ignoring what was saved of the paths", "file", file, "err", err)
	}
	k.networks = kf.Networks
	if key, ok := parseKey(kf.Key); ok {
		k.key = key
		k.sizes.latest, k.alts.latest, k.hosts.latest = kf.Sizes, kf.AltSvc, kf.Tunnels
	} else {
		rand.Read(k.key[:]) // none yet: what is named under it is learnt from now on
	}
	return k
}

func parseKey(s string) ([32]byte, bool) {
	var key [32]byte
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(key) {
		return key, false
	}
	copy(key[:], b)
	return key, true
}

// read returns the file's valid contents; networks is never nil. A
// missing file is an empty one.
func (k *knowledge) read() (knowledgeFile, error) {
	kf := knowledgeFile{Networks: map[string]estimate.State{}}
	// Not a FIFO or a device in its place: opening one would block, or
	// read without end.
	fi, err := os.Lstat(k.file)
	if errors.Is(err, os.ErrNotExist) {
		return kf, nil
	}
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file (%v)", fi.Mode().Type())
	}
	if err != nil {
		return kf, err
	}
	f, err := os.Open(k.file)
	if err != nil {
		return kf, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, knowledgeMaxBytes+1))
	if err != nil {
		return kf, err
	}
	if len(b) > knowledgeMaxBytes {
		return kf, fmt.Errorf("over %d bytes", knowledgeMaxBytes)
	}
	var got knowledgeFile
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&got); err != nil {
		return kf, err
	}
	if got.Version != knowledgeVersion {
		return kf, fmt.Errorf("version %d, not %d", got.Version, knowledgeVersion)
	}
	now := k.now()
	for id, s := range got.Networks {
		if s, ok := s.Check(now, knowledgeMaxAge); ok && len(id) == 2*sha256.Size {
			kf.Networks[id] = s
		}
	}
	kf.Key = got.Key
	if _, ok := parseKey(got.Key); ok {
		kf.Sizes, _ = got.Sizes.check(now, maxSizeOrigins)
		kf.Tunnels, _ = got.Tunnels.check(now)
		kf.AltSvc, _ = got.AltSvc.check(now)
	}
	return kf, nil
}

// restore gives est what was saved of the network id, if anything.
func (k *knowledge) restore(id string, est *estimate.Path) {
	k.mu.Lock()
	s, ok := k.networks[id]
	k.mu.Unlock()
	if ok {
		est.Restore(s)
	}
}

// transportMemory is what a Transport keeps with its Manager's
// knowledge: its sizes, and its HTTP/3 alternatives with the paths they
// failed on named by network. It holds neither the Transport nor the
// Manager: a Transport dropped without Close is collected, and its
// cleanup detaches this.
type transportMemory struct {
	k     *knowledge
	sizes *sizeCache
	alts  *altMemory
}

// altMemory is a Transport's altSvcCache as a holder, with its
// Manager's paths to name networks by.
type altMemory struct {
	c     *altSvcCache
	paths func() []*Path
}

func (a *altMemory) saved() *savedAltSvc {
	nets := map[string]string{}
	for _, p := range a.paths() {
		nets[p.Name] = networkID(p)
	}
	return a.c.saved(func(path string) string { return nets[path] })
}

// attachTransport starts sizes and alts (a new Transport's) from what
// the Manager's Transports learnt last, and saves them with its
// knowledge until detached.
func (k *knowledge) attachTransport(m *Manager, sizes *sizeCache, alts *altSvcCache) transportMemory {
	tm := transportMemory{k: k, sizes: sizes, alts: &altMemory{alts, m.Paths}}
	sizes.restore(attach(k, &k.sizes, holder[*savedSizes](sizes)))
	paths := map[string]string{}
	for _, p := range m.Paths() {
		paths[networkID(p)] = p.Name
	}
	alts.restore(attach(k, &k.alts, holder[*savedAltSvc](tm.alts)), func(network string) string { return paths[network] })
	return tm
}

// detach ends the Transport's saving, keeping what it learnt.
func (tm transportMemory) detach() {
	detach(tm.k, &tm.k.sizes, holder[*savedSizes](tm.sizes))
	detach(tm.k, &tm.k.alts, holder[*savedAltSvc](tm.alts))
}

// hostMemory is a proxy's memory of what its tunnels received, by host
// (see internal/hostsizes), kept with a Manager's knowledge: the hosts
// named by hashes under the file's key.
type hostMemory struct {
	k   *knowledge
	key [32]byte

	mu    sync.Mutex
	hosts *sizes.Keyed[sizeID]
	at    time.Time // when a size was last learnt (zero: never)
}

func init() {
	hostsizes.Of = func(manager any, maxHosts, perHost int) (hostsizes.Memory, bool) {
		m, ok := manager.(*Manager)
		if !ok || m == nil || m.knowledge == nil {
			return nil, false
		}
		return m.knowledge.attachHosts(maxHosts, perHost), true
	}
}

// attachHosts returns a hostMemory started from the tunnels' sizes
// learnt last, saved with the Manager's knowledge until it is closed.
func (k *knowledge) attachHosts(maxHosts, perHost int) *hostMemory {
	h := &hostMemory{k: k, key: k.key, hosts: sizes.NewKeyed[sizeID](maxHosts, perHost)}
	if saved := attach(k, &k.hosts, holder[*savedHosts](h)); saved != nil {
		for _, o := range saved.Hosts {
			for _, n := range o.Sizes {
				h.hosts.Add(o.ID, n)
			}
		}
		h.at = saved.At
	}
	return h
}

func (h *hostMemory) id(host string) sizeID { return keyedID(h.key, 'h', strings.ToLower(host)) }

// Predict implements hostsizes.Memory.
func (h *hostMemory) Predict(host string) int64 {
	id := h.id(host)
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.hosts.Get(id); r != nil {
		return r.Median()
	}
	return 0
}

// Learn implements hostsizes.Memory.
func (h *hostMemory) Learn(host string, n int64) {
	id := h.id(host)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hosts.Add(id, min(n, maxSizeEstimate))
	h.at = time.Now()
}

// Close implements hostsizes.Memory.
func (h *hostMemory) Close() { detach(h.k, &h.k.hosts, holder[*savedHosts](h)) }

// saved returns what h holds, for the file; nil if it never learnt.
func (h *hostMemory) saved() *savedHosts {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.at.IsZero() {
		return nil
	}
	s := &savedHosts{At: h.at}
	for id, r := range h.hosts.All() {
		s.Hosts = append(s.Hosts, savedOrigin{id, r.Sizes()})
	}
	return s
}

// newest is when anything of s was last measured.
func newest(s estimate.State) time.Time {
	t := s.RTTAt
	if s.RateAt.After(t) {
		t = s.RateAt
	}
	for _, w := range [][]estimate.Sample{s.MinRTT, s.MaxRate} {
		if len(w) > 0 && w[len(w)-1].At.After(t) {
			t = w[len(w)-1].At
		}
	}
	return t
}

// save merges what was learnt (the paths' states, by network) and the
// Transports' sizes into the file, with what other processes saved
// meanwhile: of each network, and of the sizes, the one learnt last
// wins. The file is replaced whole, by rename, so a reader never sees
// half of it; its folder is made if missing.
func (k *knowledge) save(learnt map[string]estimate.State) error {
	k.saveMu.Lock()
	defer k.saveMu.Unlock()
	kf, err := k.read()
	if err != nil {
		kf = knowledgeFile{Networks: map[string]estimate.State{}} // corrupt: replaced by what is known now
	}
	liveSizes, liveAlts, liveHosts := collect(k, &k.sizes), collect(k, &k.alts), collect(k, &k.hosts)

	k.mu.Lock()
	nets := kf.Networks
	for _, from := range []map[string]estimate.State{k.networks, learnt} {
		for id, s := range from {
			if old, ok := nets[id]; !ok || newest(s).After(newest(old)) {
				nets[id] = s
			}
		}
	}
	if len(nets) > knowledgeMaxNetworks {
		ids := make([]string, 0, len(nets))
		for id := range nets {
			ids = append(ids, id)
		}
		slices.SortFunc(ids, func(a, b string) int { return newest(nets[b]).Compare(newest(nets[a])) })
		for _, id := range ids[knowledgeMaxNetworks:] {
			delete(nets, id)
		}
	}
	k.networks = nets
	if key, ok := parseKey(kf.Key); ok && key == k.key {
		// Another process's, if it learnt since.
		k.sizes.keep(kf.Sizes)
		k.alts.keep(kf.AltSvc)
		k.hosts.keep(kf.Tunnels)
	}
	for _, s := range liveSizes {
		k.sizes.keep(s)
	}
	for _, a := range liveAlts {
		k.alts.keep(a)
	}
	for _, h := range liveHosts {
		k.hosts.keep(h)
	}
	out := knowledgeFile{Version: knowledgeVersion, Networks: nets, Key: hex.EncodeToString(k.key[:]),
		Sizes: k.sizes.latest, AltSvc: k.alts.latest, Tunnels: k.hosts.latest}
	b, err := json.Marshal(out)
	k.mu.Unlock()
	if err != nil {
		return err
	}
	return writeFileAtomic(k.file, b)
}

// saveOrWarn saves, saying on the logger if it cannot.
func (k *knowledge) saveOrWarn(learnt map[string]estimate.State) {
	if err := k.save(learnt); err != nil {
		k.logger.Warn("intents: saving what was learnt of the paths", "file", k.file, "err", err)
	}
}

// keepSaving saves the paths' knowledge every knowledgeSaveEvery, and a
// last time when Close stops it.
func (m *Manager) keepSaving() {
	defer close(m.saved)
	tick := time.NewTicker(knowledgeSaveEvery)
	defer tick.Stop()
	for {
		select {
		case <-m.saving:
			// Closed first: a Transport that ends during the last save
			// saves what it leaves itself.
			m.knowledge.mu.Lock()
			m.knowledge.closed = true
			m.knowledge.mu.Unlock()
			m.saveKnowledge()
			return
		case <-tick.C:
			m.saveKnowledge()
		}
	}
}

// saveKnowledge saves everything this Manager's estimates stand on, and
// its Transports' sizes.
func (m *Manager) saveKnowledge() {
	learnt := map[string]estimate.State{}
	for _, p := range m.Paths() {
		if p.est == nil {
			continue
		}
		if s, ok := p.est.State(); ok {
			learnt[networkID(p)] = s
		}
	}
	m.knowledge.saveOrWarn(learnt)
}

// writeFileAtomic writes b to name by way of a temporary file in the same
// folder, renamed over it: readable by its owner only, as the networks a
// user visited are theirs.
func writeFileAtomic(name string, b []byte) error {
	dir := filepath.Dir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	err = cmp.Or(err, f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// networkID names the network a path is on, as far as this host can tell
// one from another: the interface and its type, its address prefixes, its
// gateway's link-layer address (where the system tells it) and its DNS
// servers. A laptop's Wi-Fi at home and at work differ in some of them; a
// new DHCP lease in the same network does not.
func networkID(p *Path) string {
	prefixes := make([]string, 0, len(p.prefixes))
	for _, pf := range p.prefixes {
		prefixes = append(prefixes, pf.Masked().String())
	}
	slices.Sort(prefixes)
	servers := make([]string, 0, len(p.DNS))
	for _, s := range p.DNS {
		servers = append(servers, s.String())
	}
	slices.Sort(servers)
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%s\n%s\n", p.Name, p.Type, strings.Join(prefixes, ","), gatewayHardwareAddr(p.Name), strings.Join(servers, ","))
	return hex.EncodeToString(h.Sum(nil))
}

// prefixesOf are the prefixes of addrs (an interface's), less the ones
// usableAddrs leaves out.
func prefixesOf(addrs []netip.Prefix, usable []netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	for _, pf := range addrs {
		if slices.Contains(usable, pf.Addr().Unmap()) {
			out = append(out, pf)
		}
	}
	return out
}
