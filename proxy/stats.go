package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"unicode"

	"github.com/VictoriaMetrics/metrics"
	"github.com/sockintents/intents"
)

// stats are the proxy's counters, kept in a metrics set of its own (no
// global registry), written in the Prometheus text format by Metrics.
type stats struct {
	set *metrics.Set
}

func newStats() *stats { return &stats{set: metrics.NewSet()} }

func (st *stats) counter(name, path string) *metrics.Counter {
	return st.set.GetOrCreateCounter(fmt.Sprintf(`%s{path="%s"}`, name, label(path)))
}

// label is name as a label value: an interface name may hold bytes the
// text format would have to escape, and the metrics set takes no name it
// cannot parse; those become '_'.
func label(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '"' || r == '\\' || !unicode.IsPrint(r) {
			return '_'
		}
		return r
	}, name)
}

// request counts a request forwarded (its path is the Transport's to
// count: see Metrics).
func (st *stats) request() { st.set.GetOrCreateCounter("intents_proxy_forwarded_total").Inc() }

// failure counts a forwarded request that failed, on the path that went
// down if one did.
func (st *stats) failure(err error) {
	path := "unknown"
	var pd *intents.PathDownError
	if errors.As(err, &pd) {
		path = pd.Path
	}
	st.counter("intents_proxy_failures_total", path).Inc()
}

// tunnelFailed counts a tunnel that could not be opened.
func (st *stats) tunnelFailed() { st.counter("intents_proxy_failures_total", "unknown").Inc() }

// tunnel counts a tunnel that ended, with its bytes each way.
func (st *stats) tunnel(path string, sent, received int64) {
	st.counter("intents_proxy_tunnels_total", path).Inc()
	st.counter("intents_proxy_tunnel_sent_bytes_total", path).Add(int(sent))
	st.counter("intents_proxy_tunnel_received_bytes_total", path).Add(int(received))
}

// Metrics writes the proxy's counters in the Prometheus text format:
// per path, the requests forwarded through the Transport and the bytes
// of their responses, the tunnels ended and their bytes each way, and the
// failures (on path "unknown" when no path had been chosen or none went
// down).
func (s *Server) Metrics(w io.Writer) {
	s.init()
	s.stats.set.WritePrometheus(w)
	if s.Transport == nil {
		return
	}
	byPath := s.Transport.Stats()
	names := make([]string, 0, len(byPath))
	for name := range byPath {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		st := byPath[name]
		path := name
		if path == "" {
			path = "system"
		}
		metrics.WriteCounterUint64(w, fmt.Sprintf(`intents_proxy_requests_total{path="%s"}`, label(path)), uint64(st.Requests))
		metrics.WriteCounterUint64(w, fmt.Sprintf(`intents_proxy_response_bytes_total{path="%s"}`, label(path)), uint64(st.BytesReceived))
	}
}

// MetricsHandler serves Metrics, for a status listener.
func (s *Server) MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.Metrics(w)
	})
}
