package proxy

import (
	"strings"
	"sync"

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
// by it. Bounded: past maxHosts, the host first heard from goes.
type hostSizes struct {
	mu    sync.Mutex
	hosts *sizes.Keyed
}

func newHostSizes(max int) *hostSizes {
	return &hostSizes{hosts: sizes.NewKeyed(max, sizesPerHost)}
}

// learn records that a tunnel to host received n bytes.
func (h *hostSizes) learn(host string, n int64) {
	if n <= 0 {
		return // nothing came: a failed or refused tunnel says nothing of the host
	}
	host = strings.ToLower(host)
	h.mu.Lock()
	h.hosts.Add(host, n)
	h.mu.Unlock()
}

// predict is the median of what host's last tunnels received; 0 if none
// is known.
func (h *hostSizes) predict(host string) int64 {
	host = strings.ToLower(host)
	h.mu.Lock()
	defer h.mu.Unlock()
	if r := h.hosts.Get(host); r != nil {
		return r.Median()
	}
	return 0
}
