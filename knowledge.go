package intents

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sockintents/intents/internal/estimate"
)

// Knowledge limits: what a Manager keeps of its paths between processes
// (Config.Knowledge).
const (
	// knowledgeMaxAge is how long what was learnt of a network is kept:
	// older knowledge is dropped when read.
	knowledgeMaxAge = 24 * time.Hour
	// knowledgeMaxNetworks bounds the file: the networks least recently
	// learnt are dropped beyond it.
	knowledgeMaxNetworks = 256
	// knowledgeMaxBytes bounds what is read: a larger file is not ours.
	knowledgeMaxBytes = 1 << 20
	// knowledgeSaveEvery is how often a Manager saves while it runs, so a
	// process that is killed loses a minute at most.
	knowledgeSaveEvery = time.Minute
	knowledgeVersion   = 1
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
	Version  int                     `json:"version"`
	Networks map[string]savedNetwork `json:"networks"`
}

// savedNetwork is what was learnt of one path on one network.
type savedNetwork struct {
	RTT        time.Duration `json:"rtt_ns,omitempty"`
	MinRTT     time.Duration `json:"min_rtt_ns,omitempty"`
	Samples    int           `json:"samples,omitempty"`
	RTTAt      time.Time     `json:"rtt_at,omitzero"`
	Capacity   float64       `json:"capacity_bps,omitempty"`
	CapacityAt time.Time     `json:"capacity_at,omitzero"`
	Loss       float64       `json:"loss,omitempty"`
}

// Bounds of a saved value that is believed: a file may be corrupt, or
// written by someone else.
const (
	maxSavedRTT      = time.Minute
	maxSavedCapacity = 1e12 // 1 Tbit/s
	savedClockSkew   = time.Minute
)

// valid reports whether n holds only values that could be measurements,
// learnt within knowledgeMaxAge of now, trimmed of the part that is too
// old: the RTTs or the capacity alone may be.
func (n savedNetwork) valid(now time.Time) (savedNetwork, bool) {
	fresh := func(at time.Time) bool {
		return !at.IsZero() && at.Before(now.Add(savedClockSkew)) && now.Sub(at) <= knowledgeMaxAge
	}
	if n.Samples < 0 || n.Loss < 0 || n.Loss > 1 || n.Loss != n.Loss {
		return savedNetwork{}, false
	}
	if n.RTT != 0 || n.MinRTT != 0 {
		if n.RTT <= 0 || n.MinRTT <= 0 || n.RTT > maxSavedRTT || n.MinRTT > maxSavedRTT || n.Samples == 0 {
			return savedNetwork{}, false
		}
		if !fresh(n.RTTAt) {
			n.RTT, n.MinRTT, n.Samples, n.RTTAt = 0, 0, 0, time.Time{}
		}
	}
	if n.Capacity != 0 {
		if !(n.Capacity > 0 && n.Capacity <= maxSavedCapacity) {
			return savedNetwork{}, false
		}
		if !fresh(n.CapacityAt) {
			n.Capacity, n.CapacityAt = 0, time.Time{}
		}
	}
	return n, n.RTT > 0 || n.Capacity > 0
}

// newest is when n was last learnt.
func (n savedNetwork) newest() time.Time {
	if n.RTTAt.After(n.CapacityAt) {
		return n.RTTAt
	}
	return n.CapacityAt
}

// knowledge is a Manager's store of what it and earlier Managers learnt,
// by network (see networkID), kept in a file.
type knowledge struct {
	file   string
	logger *slog.Logger
	now    func() time.Time

	mu       sync.Mutex // guards networks, and orders the saves
	networks map[string]savedNetwork
}

// loadKnowledge reads file. A missing file is no knowledge; a corrupt,
// foreign or unreadable one is no knowledge too, said once on logger.
func loadKnowledge(file string, logger *slog.Logger) *knowledge {
	k := &knowledge{file: file, logger: logger, now: time.Now, networks: map[string]savedNetwork{}}
	nets, err := k.read()
	if err != nil {
		k.logger.Warn("intents: ignoring what was saved of the paths", "file", file, "err", err)
		return k
	}
	k.networks = nets
	return k
}

// read returns the file's valid networks.
func (k *knowledge) read() (map[string]savedNetwork, error) {
	nets := map[string]savedNetwork{}
	f, err := os.Open(k.file)
	if errors.Is(err, os.ErrNotExist) {
		return nets, nil
	}
	if err != nil {
		return nets, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, knowledgeMaxBytes+1))
	if err != nil {
		return nets, err
	}
	if len(b) > knowledgeMaxBytes {
		return nets, fmt.Errorf("over %d bytes", knowledgeMaxBytes)
	}
	var kf knowledgeFile
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&kf); err != nil {
		return nets, err
	}
	if kf.Version != knowledgeVersion {
		return nets, fmt.Errorf("version %d, not %d", kf.Version, knowledgeVersion)
	}
	now := k.now()
	for id, n := range kf.Networks {
		if n, ok := n.valid(now); ok && len(id) == 2*sha256.Size {
			nets[id] = n
		}
	}
	return nets, nil
}

// lookup returns what was learnt of the network id, if anything.
func (k *knowledge) lookup(id string) (estimate.Remembered, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	n, ok := k.networks[id]
	if !ok {
		return estimate.Remembered{}, false
	}
	return estimate.Remembered{RTT: n.RTT, MinRTT: n.MinRTT, Samples: n.Samples, RTTAt: n.RTTAt,
		Capacity: n.Capacity, CapacityAt: n.CapacityAt, Loss: n.Loss}, true
}

// learnt is one path's knowledge to save.
type learnt struct {
	id string
	r  estimate.Remembered
}

// save merges what was learnt into the file: with what other processes
// saved meanwhile, a part not learnt anew (a capacity no transfer showed
// this time) kept from before. The file is replaced whole, by rename, so
// a reader never sees half of it; its folder is made if missing.
func (k *knowledge) save(learnt []learnt) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	nets, err := k.read()
	if err != nil {
		nets = map[string]savedNetwork{} // corrupt: replaced by what is known now
	}
	for id, n := range k.networks {
		if old, ok := nets[id]; !ok || n.newest().After(old.newest()) {
			nets[id] = n
		}
	}
	for _, l := range learnt {
		n := nets[l.id]
		if l.r.Samples > 0 {
			n.RTT, n.MinRTT, n.Samples, n.RTTAt = l.r.RTT, l.r.MinRTT, l.r.Samples, l.r.RTTAt
		}
		if l.r.Capacity > 0 && !l.r.CapacityAt.Before(n.CapacityAt) {
			n.Capacity, n.CapacityAt = l.r.Capacity, l.r.CapacityAt
		}
		if l.r.Samples > 0 {
			n.Loss = l.r.Loss
		}
		if n, ok := n.valid(k.now()); ok {
			nets[l.id] = n
		}
	}
	if len(nets) > knowledgeMaxNetworks {
		ids := make([]string, 0, len(nets))
		for id := range nets {
			ids = append(ids, id)
		}
		slices.SortFunc(ids, func(a, b string) int { return nets[b].newest().Compare(nets[a].newest()) })
		for _, id := range ids[knowledgeMaxNetworks:] {
			delete(nets, id)
		}
	}
	k.networks = nets
	b, err := json.MarshalIndent(knowledgeFile{Version: knowledgeVersion, Networks: nets}, "", "\t")
	if err != nil {
		return err
	}
	return writeFileAtomic(k.file, b)
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
