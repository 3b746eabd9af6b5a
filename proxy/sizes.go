package proxy

import (
	"slices"
	"strings"
	"sync"
)

// maxHosts bounds the hosts whose tunnel sizes are kept.
const maxHosts = 4096

// sizesPerHost is how many of a host's last tunnels its size is the
// median of.
const sizesPerHost = 5

// hostSizes remembers how many bytes each host sent through its last
// tunnels: the policy cannot see inside TLS, so a host's next tunnel is
// expected to receive what its last ones did (their median), and placed
// by it. Bounded: past maxHosts, a host not seen since the oldest
// insertion goes.
type hostSizes struct {
	mu    sync.Mutex
	max   int
	hosts map[string][]int64 // the last sizes, oldest first
	order []string           // insertion order, for eviction
}

func newHostSizes(max int) *hostSizes {
	return &hostSizes{max: max, hosts: map[string][]int64{}}
}

// learn records that a tunnel to host received n bytes.
func (h *hostSizes) learn(host string, n int64) {
	if n <= 0 {
		return // nothing came: a failed or refused tunnel says nothing of the host
	}
	host = strings.ToLower(host)
	h.mu.Lock()
	defer h.mu.Unlock()
	sizes, ok := h.hosts[host]
	if !ok {
		if len(h.order) >= h.max {
			delete(h.hosts, h.order[0])
			h.order = slices.Delete(h.order, 0, 1)
		}
		h.order = append(h.order, host)
	}
	if len(sizes) == sizesPerHost {
		sizes = slices.Delete(sizes, 0, 1)
	}
	h.hosts[host] = append(sizes, n)
}

// predict is the median of what host's last tunnels received; 0 if none
// is known.
func (h *hostSizes) predict(host string) int64 {
	host = strings.ToLower(host)
	h.mu.Lock()
	sizes := slices.Clone(h.hosts[host])
	h.mu.Unlock()
	if len(sizes) == 0 {
		return 0
	}
	slices.Sort(sizes)
	return sizes[(len(sizes)-1)/2]
}
