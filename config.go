package intents

import (
	"crypto/tls"
	"log/slog"
	"time"
)

// PathConfig names a path explicitly. Zero fields are discovered.
type PathConfig struct {
	Interface string        // interface name; required
	Type      InterfaceType // TypeUnspecified: classify automatically
	// DNS servers as "ADDR" or "ADDR:PORT" (port 53 by default). Empty:
	// discover (systemd-resolved per-link state, else resolv.conf).
	DNS    []string
	Search []string // search domains; nil: those of the discovered configuration
	// DNSOverTLS names DNS-over-TLS servers (RFC 7858) for the path, as
	// "ADDR" or "ADDR:PORT" (port 853 by default), either followed by
	// "#NAME", the name the server's certificate must show (without it,
	// its address must): "1.1.1.1#cloudflare-dns.com". Names on the path
	// are then resolved through them, over connections kept between
	// queries, and the path's plaintext DNS servers are not asked, even
	// when the encrypted ones fail, unless DNSPlaintextFallback.
	DNSOverTLS []string
	// DNSOverHTTPS names DNS-over-HTTPS servers (RFC 8484) for the path:
	// the URL of each ("https://1.1.1.1/dns-query"), whose host, if a
	// name, is followed by "#ADDR" or "#ADDR:PORT", the address to
	// connect to ("https://cloudflare-dns.com/dns-query#1.1.1.1": no
	// lookup is made to reach a resolver). Queries are POSTed over HTTPS
	// connections bound to the path and kept between queries; as for
	// DNSOverTLS, the plaintext servers are not asked unless
	// DNSPlaintextFallback. Asked after the DNS-over-TLS servers.
	DNSOverHTTPS         []string
	DNSPlaintextFallback bool
	// Expensive and Constrained override the default labels (cellular is
	// expensive, nothing is constrained) when non-nil.
	Expensive   *bool
	Constrained *bool
	// RTT and Bandwidth (bits/s) are priors used until measurements exist.
	RTT       time.Duration
	Bandwidth int64
}

// Config configures a Manager.
type Config struct {
	// Paths, when non-empty, lists the only interfaces to use, in this
	// order, each at most once. When empty, every interface with a usable
	// address is a path.
	Paths []PathConfig
	// Policy chooses paths; nil leaves routing to the operating system
	// unless intents constrain the paths (see Dialer).
	Policy Policy
	// ResolvConf is the resolv.conf to read (default /etc/resolv.conf).
	ResolvConf string
	// HostsFile is the hosts file to read (default /etc/hosts).
	HostsFile string
	// DNSTLSConfig is the TLS configuration of encrypted DNS: DNS over TLS
	// and over HTTPS (PathConfig.DNSOverTLS, DNSOverHTTPS). RootCAs nil
	// trusts the system's roots; ServerName and NextProtos are set per
	// server.
	DNSTLSConfig *tls.Config
	// NoWatch turns off watching interface changes (Linux only; elsewhere the
	// table is refreshed only by Refresh).
	NoWatch bool
	// MPTCPEndpoints makes every up, non-loopback path an MPTCP path-manager
	// endpoint (flag subflow), so MPTCP connections grow a subflow on each
	// path besides the first (whose path the Dialer's binding picks). It
	// needs CAP_NET_ADMIN; without it the Manager keeps working with the
	// endpoints the system has, and MPTCPError says why.
	//
	// The Manager also keeps the backup flag of the endpoints it added in
	// line with the open MPTCP connections: while MultipathHandover
	// connections are open and no MultipathAggregate one is, the paths that
	// are no handover connection's first path are backup endpoints. The
	// kernel's path manager keeps that flag per endpoint, for the whole
	// network namespace, not per connection (per connection needs the
	// userspace path manager, which this library does not run): handover
	// connections with different first paths, or open beside an aggregate
	// one, aggregate too. Close deletes the endpoints the Manager added,
	// unless MPTCP connections it dialed are still open.
	MPTCPEndpoints bool
	// ProbeTarget, if set, is "host:port" to probe every path with
	// actively, as PERM's probing schedulers do: a TCP connect to it
	// through each path (a name is resolved per path) every ProbeInterval,
	// at least 1s (default 10s), so probing stays a trickle. The connect
	// times are RTT samples; Estimate.ProbeRTT is the median of the recent
	// ones. Probes reach the target from every path: use one of your own.
	// Off by default.
	ProbeTarget   string
	ProbeInterval time.Duration
	// Logger, if set, receives every decision at debug level: intents,
	// destination, the paths and connections offered, the choices and the
	// policy's reason.
	Logger *slog.Logger
	// Knowledge, if set, is a file in which the Manager keeps everything
	// its decisions stand on that outlives a page, so that a program
	// started again decides as it would have had it kept running: each
	// path's estimates whole (the filters behind its RTT, capacity, rate,
	// loss and probes, with when each was measured), by network (an
	// interface's addresses' prefixes, gateway and DNS servers tell one
	// from another), whether a first request was raced there, its
	// Transports' memory of response sizes (each URL's last, each origin's
	// recent ones) and of HTTP/3 alternatives, and a proxy's of its
	// tunnels' sizes, whose origins, URLs and hosts are named by hashes
	// under a random key of the file's, not in clear. A new Manager on a network
	// an earlier one saw starts from its estimates, and a new Transport
	// from the sizes, up to a day old (Estimate.Remembered says which
	// estimates stand on an earlier Manager's measurements). The file is
	// its owner's alone, saved every minute, on Close and as a Transport
	// closes, replaced whole; a corrupt or foreign one is ignored with a
	// warning (on Logger, else slog's default). See DefaultKnowledgeFile.
	Knowledge string
}
