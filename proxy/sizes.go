package proxy

import (
	"strings"
	"sync"

	"github.com/sockintents/intents/internal/hostsizes"
	"github.com/sockintents/intents/internal/sizes"
)

// maxHosts bounds the hosts whose tunnel sizes are kept.
const maxHosts = 4096

// sizesPerHost is how many of a host's last tunnels its size is the
// median of.
const sizesPerHost = 5

// hostSizes remembers how many bytes each host sent through its last
// tunnels: the policy cannot see inside TLS, so a host's next tunnel is
// expected to receive what its last ones did (their median), and placed
// by it. Bounded: past maxHosts, the host first heard from goes. Where
// the Manager that places the tunnels keeps Knowledge, the memory is
// kept with it (hosts as keyed hashes), so that a proxy started again
// expects what this one would have.
type hostSizes struct {
	kept hostsizes.Memory // nil: the memory is this one's own

	mu    sync.Mutex
	hosts *sizes.Keyed[string]
}

// newHostSizes returns a memory of max hosts, kept with manager's
// Knowledge if it has any.
func newHostSizes(max int, manager any) *hostSizes {
	if m, ok := hostsizes.Of(manager, max, sizesPerHost); ok {
		return &hostSizes{kept: m}
	}
	return &hostSizes{hosts: sizes.NewKeyed[string](max, sizesPerHost)}
}

// learn records that a tunnel to host received n bytes.
func (h *hostSizes) learn(host string, n int64) {
	if n <= 0 {
		return // nothing came: a failed or refused tunnel says nothing of the host
	}
	if h.kept != nil {
		h.kept.Learn(host, n)
		return
	}
	host = strings.ToLower(host)
	h.mu.Lock()
	h.hosts.Add(host, n)
	h.mu.Unlock()
}

// predict is the median of what host's last tunnels received; 0 if none
// is known.
func (h *hostSizes) predict(host string) int64 {
	if h.kept != nil {
		return h.kept.Predict(host)
	}
	host = strings.ToLower(host)
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.hosts.Get(host); r != nil {
		return r.Median()
	}
	return 0
}

// close hands what was learnt to the Manager's Knowledge, if it keeps it.
func (h *hostSizes) close() {
	if h.kept != nil {
		h.kept.Close()
	}
}
