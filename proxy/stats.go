package proxy

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
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
	var byPath map[string]pathCount
	switch {
	case s.pools != nil:
		byPath = s.pools.stats()
	case s.Transport != nil:
		byPath = map[string]pathCount{}
		for name, st := range s.Transport.Stats() {
			byPath[name] = pathCount{st.Requests, st.BytesReceived}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(byPath)) {
		st := byPath[name]
		path := name
		if path == "" {
			path = (*intents.Path)(nil).String() // the OS's routing, as the proxy names it elsewhere
		}
		metrics.WriteCounterUint64(w, fmt.Sprintf(`intents_proxy_requests_total{path="%s"}`, label(path)), uint64(st.requests))
		metrics.WriteCounterUint64(w, fmt.Sprintf(`intents_proxy_response_bytes_total{path="%s"}`, label(path)), uint64(st.bytes))
	}
}

// Limits of the metrics listener: a scraper or two, not the world.
const (
	metricsMaxClients = 16
	metricsTimeout    = 10 * time.Second
	metricsMaxHeader  = 8 << 10
)

// ServeMetrics serves Metrics at /metrics to the clients of l that
// MetricsAllow admits (nil: loopback only, whatever Allow says), at most
// 16 at once, each with 10 s to send its request, to read the answer and
// between requests. It returns when l fails or Close is called
// metricsAllowed reports whether a client at remote may read the
// metrics: one of MetricsAllow, or without it a loopback client alone.
func (s *Server) metricsAllowed(remote string) bool {
	a := clientOf(remote)
	if s.MetricsAllow == nil {
		return a.IsLoopback()
	}
	return inPrefixes(s.MetricsAllow, a)
}

// (ErrServerClosed).
func (s *Server) ServeMetrics(l net.Listener) error {
	s.init()
	metrics := s.MetricsHandler()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if !s.metricsAllowed(r.RemoteAddr) {
			http.Error(w, "intents proxy: client not allowed", http.StatusForbidden)
			return
		}
		metrics.ServeHTTP(w, r)
	})
	hs := &http.Server{
		Handler:           mux,
		MaxHeaderBytes:    metricsMaxHeader,
		ReadHeaderTimeout: metricsTimeout,
		ReadTimeout:       metricsTimeout,
		WriteTimeout:      metricsTimeout,
		IdleTimeout:       metricsTimeout,
		ErrorLog:          slogErrorLog(s.Logger),
	}
	if !s.addListener(l, hs, "") {
		return ErrServerClosed
	}
	ll := s.newLimitListener(l, metricsMaxClients, s.metricsAllowed)
	ll.parkMax = metricsMaxClients
	hs.ConnState = ll.connState
	err := hs.Serve(ll)
	if errors.Is(err, http.ErrServerClosed) {
		return ErrServerClosed
	}
	return err
}

// MetricsHandler serves Metrics, for a status listener.
func (s *Server) MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.Metrics(w)
	})
}
