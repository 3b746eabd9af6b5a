// Package intents implements Socket Intents for Go: applications say what a
// connection or request is for, and a swappable policy picks the access
// network (interface, source address, DNS view, MPTCP or not) that serves it.
//
// Intents travel in a context.Context (WithIntents / FromContext). A Dialer
// is a drop-in net.Dialer that honours them; a Transport is a drop-in
// http.RoundTripper that chooses path and connection per request, over an
// intent-aware connection pool; a Pool does the same for your own
// request/response protocol over TCP; a Resolver resolves names per path
// and returns endpoints ordered by the policy; a Manager owns the table of
// paths (interfaces with their addresses, DNS servers, labels and live
// estimates) and the Policy (built-ins in package policy).
//
// The zero Dialer behaves exactly like the zero net.Dialer, and the zero
// Transport like http.DefaultTransport: drop-in first, smart when
// configured.
package intents

import (
	"context"
	"fmt"
	"maps"
	"math/bits"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Category says what kind of traffic a communication unit carries.
type Category uint8

// Categories, from the Socket Intents prototype. The zero value means
// unspecified (mixed traffic).
const (
	CategoryUnspecified Category = iota
	CategoryQuery                // short request/response, latency matters
	CategoryBulk                 // large transfer, capacity matters
	CategoryControl              // signalling, small and sensitive
	CategoryKeepalive            // periodic keep-alive traffic
	CategoryStream               // continuous media at a bitrate
)

// Burstiness describes how traffic is spread over time.
type Burstiness uint8

// Burstiness values; the zero value means unspecified.
const (
	BurstinessUnspecified Burstiness = iota
	BurstinessNone                   // constant rate
	BurstinessRegular                // bursts at regular intervals
	BurstinessRandom                 // bursts at random intervals
	BurstinessBulk                   // one big burst
)

// Timeliness says how soon data must arrive. Unspecified means transfer.
type Timeliness uint8

// Timeliness values; the zero value means unspecified (treated as transfer).
const (
	TimelinessUnspecified Timeliness = iota
	TimelinessStream                 // continuous, deadline per unit
	TimelinessInteractive            // a human waits
	TimelinessTransfer               // finish reasonably soon
	TimelinessBackground             // whenever it is cheap
)

// Resilience says how well the application copes with a path failing.
// Unspecified means recoverable.
type Resilience uint8

// Resilience values; the zero value means unspecified (treated as recoverable).
const (
	ResilienceUnspecified Resilience = iota
	ResilienceSensitive              // a broken connection hurts the user
	ResilienceRecoverable            // the application can retry
	ResilienceResilient              // failures do not matter
)

// Cost says how much the application may spend on expensive paths.
// Unspecified means balance cost.
type Cost uint8

// Cost values; the zero value means unspecified (treated as balance).
//
// CostNoExpense acts like ProhibitExpensive; CostOptimize moves expensive
// paths behind all others (as if they were avoided).
const (
	CostUnspecified Cost = iota
	CostNoExpense        // never use an expensive path
	CostOptimize         // use an expensive path only when nothing else works
	CostBalance          // weigh cost against performance
	CostIgnore           // cost does not matter
)

// Level is a preference for (or against) a path.
type Level int8

// Path preference levels, as in TAPS (RFC 9622). The zero value is no preference.
const (
	LevelNone     Level = iota // no preference
	LevelRequire               // use only paths that are required
	LevelPrefer                // try these paths first
	LevelAvoid                 // try these paths last
	LevelProhibit              // never use these paths
)

// InterfaceType classifies a path's link.
type InterfaceType uint8

// Interface types. TypeOther covers virtual and unclassified links. The zero
// value, TypeUnspecified, appears only in configuration, where it means
// "classify automatically".
const (
	TypeUnspecified InterfaceType = iota
	TypeWifi
	TypeCellular
	TypeWired
	TypeLoopback
	TypeOther
)

// Multipath says whether a connection may use MPTCP.
type Multipath uint8

// Multipath modes; the zero value means unspecified (the policy decides).
const (
	MultipathUnspecified Multipath = iota
	MultipathOff                   // plain TCP
	MultipathHandover              // MPTCP, other paths as backup subflows (see Config.MPTCPEndpoints)
	MultipathAggregate             // MPTCP, subflows on all permitted paths
)

// Intents describe a communication unit (a connection or a request) so the
// policy can choose a path for it. The zero value says nothing: any path,
// any way.
//
// Intents are values; the maps are never modified by this package after
// WithIntents, which keeps its own copy.
type Intents struct {
	Category         Category
	SizeToBeReceived int64         // bytes expected to be received; 0 = unknown
	SizeToBeSent     int64         // bytes expected to be sent; 0 = unknown
	Duration         time.Duration // expected lifetime; 0 = unknown
	Bitrate          int64         // bits per second; 0 = unknown
	Burstiness       Burstiness
	Timeliness       Timeliness
	Resilience       Resilience
	Cost             Cost

	// Interfaces sets a preference level per interface name (e.g. "wlan0").
	// A name's level takes precedence over its type's level.
	Interfaces map[string]Level
	// Types sets a preference level per interface type.
	Types map[InterfaceType]Level
	// ProhibitExpensive excludes paths labelled expensive (cellular by default).
	ProhibitExpensive bool
	// ProhibitConstrained excludes paths labelled constrained (low data mode).
	ProhibitConstrained bool
	// Multipath asks for (or forbids) MPTCP.
	Multipath Multipath
}

type ctxKey struct{}

// WithIntents returns a copy of ctx carrying in. If ctx already carries
// intents, in is merged over them field by field (see Intents.Merge), so a
// request can refine what its connection or client said.
func WithIntents(ctx context.Context, in Intents) context.Context {
	if prev, ok := ctx.Value(ctxKey{}).(*Intents); ok {
		in = prev.Merge(in)
	} else {
		in = in.clone()
	}
	return context.WithValue(ctx, ctxKey{}, &in)
}

// FromContext returns the intents carried by ctx, and whether there were any.
// The returned maps are shared with the context and must not be modified.
func FromContext(ctx context.Context) (Intents, bool) {
	in, ok := ctx.Value(ctxKey{}).(*Intents)
	if !ok {
		return Intents{}, false
	}
	return *in, true
}

// Merge returns in overridden by over, field by field: every non-zero scalar
// of over replaces in's; the preference maps are merged key by key with over
// winning (so over can reset a key with LevelNone), except that a
// prohibition stays; ProhibitExpensive and ProhibitConstrained are or-ed:
// a refinement may add a restriction but never silently lift one. Neither
// argument is modified.
func (in Intents) Merge(over Intents) Intents {
	out := in.clone()
	override(&out.Category, over.Category)
	override(&out.SizeToBeReceived, over.SizeToBeReceived)
	override(&out.SizeToBeSent, over.SizeToBeSent)
	override(&out.Duration, over.Duration)
	override(&out.Bitrate, over.Bitrate)
	override(&out.Burstiness, over.Burstiness)
	override(&out.Timeliness, over.Timeliness)
	override(&out.Resilience, over.Resilience)
	override(&out.Cost, over.Cost)
	override(&out.Multipath, over.Multipath)
	out.ProhibitExpensive = out.ProhibitExpensive || over.ProhibitExpensive
	out.ProhibitConstrained = out.ProhibitConstrained || over.ProhibitConstrained
	out.Interfaces = mergeLevels(out.Interfaces, over.Interfaces)
	out.Types = mergeLevels(out.Types, over.Types)
	return out
}

// mergeLevels sets dst's levels to over's, key by key, except that a
// prohibition stays: a refinement may restrict, never lift one.
func mergeLevels[K comparable](dst, over map[K]Level) map[K]Level {
	if len(over) == 0 {
		return dst
	}
	if dst == nil {
		dst = make(map[K]Level, len(over))
	}
	for k, l := range over {
		if dst[k] != LevelProhibit {
			dst[k] = l
		}
	}
	return dst
}

// override sets *dst to v unless v is the zero value ("not said").
func override[T comparable](dst *T, v T) {
	var zero T
	if v != zero {
		*dst = v
	}
}

func (in Intents) clone() Intents {
	in.Interfaces = maps.Clone(in.Interfaces)
	in.Types = maps.Clone(in.Types)
	return in
}

// constrainsPaths reports whether in restricts or orders paths at all.
func (in *Intents) constrainsPaths() bool {
	if in.ProhibitExpensive || in.ProhibitConstrained || in.Cost == CostNoExpense || in.Cost == CostOptimize {
		return true
	}
	for _, l := range in.Interfaces {
		if l != LevelNone {
			return true
		}
	}
	for _, l := range in.Types {
		if l != LevelNone {
			return true
		}
	}
	return false
}

// Names used by String and ParseIntents. Index = enum value.
var (
	categoryNames   = []string{"", "query", "bulk", "control", "keepalive", "stream"}
	burstinessNames = []string{"", "none", "regular", "random", "bulk"}
	timelinessNames = []string{"", "stream", "interactive", "transfer", "background"}
	resilienceNames = []string{"", "sensitive", "recoverable", "resilient"}
	costNames       = []string{"", "noexpense", "optimize", "balance", "ignore"}
	levelNames      = []string{"none", "require", "prefer", "avoid", "prohibit"}
	typeNames       = []string{"", "wifi", "cellular", "wired", "loopback", "other"}
	multipathNames  = []string{"", "off", "handover", "aggregate"}
)

func enumString(names []string, v uint8) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return strconv.Itoa(int(v))
}

// String returns the name ParseIntents reads, e.g. "bulk".
func (c Category) String() string { return enumString(categoryNames, uint8(c)) }

// String returns the name ParseIntents reads, e.g. "random".
func (b Burstiness) String() string { return enumString(burstinessNames, uint8(b)) }

// String returns the name ParseIntents reads, e.g. "interactive".
func (t Timeliness) String() string { return enumString(timelinessNames, uint8(t)) }

// String returns the name ParseIntents reads, e.g. "sensitive".
func (r Resilience) String() string { return enumString(resilienceNames, uint8(r)) }

// String returns the name ParseIntents reads, e.g. "noexpense".
func (c Cost) String() string { return enumString(costNames, uint8(c)) }

// String returns the name ParseIntents reads, e.g. "aggregate".
func (m Multipath) String() string { return enumString(multipathNames, uint8(m)) }

// String returns the name ParseIntents reads, e.g. "wifi".
func (t InterfaceType) String() string { return enumString(typeNames, uint8(t)) }

// String returns the level's key in the text form, e.g. "prefer".
func (l Level) String() string {
	if l >= 0 && int(l) < len(levelNames) {
		return levelNames[l]
	}
	return strconv.Itoa(int(l))
}

// String returns the compact text form read by ParseIntents, e.g.
// "category=bulk,recv=10MB,prefer=wifi,prohibit=cellular". Keys appear in a
// fixed order and preferences sorted, so equal intents give equal strings.
// The zero Intents gives "".
func (in Intents) String() string {
	var b strings.Builder
	add := func(k, v string) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
	}
	if in.Category != 0 {
		add("category", in.Category.String())
	}
	if in.SizeToBeReceived != 0 {
		add("recv", formatBytes(in.SizeToBeReceived))
	}
	if in.SizeToBeSent != 0 {
		add("send", formatBytes(in.SizeToBeSent))
	}
	if in.Duration != 0 {
		add("duration", in.Duration.String())
	}
	if in.Bitrate != 0 {
		add("bitrate", formatBitrate(in.Bitrate))
	}
	if in.Burstiness != 0 {
		add("burstiness", in.Burstiness.String())
	}
	if in.Timeliness != 0 {
		add("timeliness", in.Timeliness.String())
	}
	if in.Resilience != 0 {
		add("resilience", in.Resilience.String())
	}
	if in.Cost != 0 {
		add("cost", in.Cost.String())
	}
	if in.Multipath != 0 {
		add("multipath", in.Multipath.String())
	}
	if in.ProhibitExpensive {
		add("prohibit", "expensive")
	}
	if in.ProhibitConstrained {
		add("prohibit", "constrained")
	}
	for _, t := range slices.Sorted(maps.Keys(in.Types)) {
		add(in.Types[t].String(), t.String())
	}
	for _, name := range slices.Sorted(maps.Keys(in.Interfaces)) {
		add(in.Interfaces[name].String(), formatInterfaceName(name))
	}
	return b.String()
}

// Interface names that are reserved words, start with "if:" or hold
// characters of the syntax are written as "if:" and the name query-escaped.
func formatInterfaceName(name string) string {
	if name == "" || slices.Contains(typeNames, name) || name == "expensive" || name == "constrained" ||
		strings.HasPrefix(name, "if:") || url.QueryEscape(name) != name {
		return "if:" + url.QueryEscape(name)
	}
	return name
}

func parseInterfaceName(v string) (string, error) {
	if rest, ok := strings.CutPrefix(v, "if:"); ok {
		return url.QueryUnescape(rest)
	}
	return v, nil
}

// ParseIntents parses the text form written by Intents.String: comma-separated
// key=value pairs. Keys:
//
//	category    query|bulk|control|keepalive|stream
//	recv, send  a size: 1500, 10KB, 10KiB, 2.5MB, 1GiB (KB/MB/GB are powers of 1000)
//	duration    a Go duration: 1m30s
//	bitrate     bits per second: 800000, 800kbps, 5Mbps, 1Gbps
//	burstiness  none|regular|random|bulk
//	timeliness  stream|interactive|transfer|background
//	resilience  sensitive|recoverable|resilient
//	cost        noexpense|optimize|balance|ignore
//	multipath   off|handover|aggregate
//	require, prefer, none, avoid, prohibit
//	            an interface type (wifi|cellular|wired|loopback|other) or an
//	            interface name (if:NAME, query-escaped, when it is a reserved
//	            word or holds a comma, '=', space or '%'); prohibit
//	            also takes expensive and constrained. These keys may repeat.
//
// An error names the bad key or value.
func ParseIntents(s string) (Intents, error) {
	var in Intents
	s = strings.TrimSpace(s)
	if s == "" {
		return in, nil
	}
	for item := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(item), "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return Intents{}, fmt.Errorf("intents: %q is not key=value", item)
		}
		var err error
		switch k {
		case "category":
			err = parseEnum(&in.Category, categoryNames, k, v)
		case "recv":
			in.SizeToBeReceived, err = parseBytes(v)
		case "send":
			in.SizeToBeSent, err = parseBytes(v)
		case "duration":
			in.Duration, err = time.ParseDuration(v)
			if err == nil && in.Duration < 0 {
				err = fmt.Errorf("negative")
			}
		case "bitrate":
			in.Bitrate, err = parseBitrate(v)
		case "burstiness":
			err = parseEnum(&in.Burstiness, burstinessNames, k, v)
		case "timeliness":
			err = parseEnum(&in.Timeliness, timelinessNames, k, v)
		case "resilience":
			err = parseEnum(&in.Resilience, resilienceNames, k, v)
		case "cost":
			err = parseEnum(&in.Cost, costNames, k, v)
		case "multipath":
			err = parseEnum(&in.Multipath, multipathNames, k, v)
		case "require", "prefer", "none", "avoid", "prohibit":
			err = in.parsePreference(Level(slices.Index(levelNames, k)), v)
		default:
			return Intents{}, fmt.Errorf("intents: unknown key %q", k)
		}
		if err != nil {
			return Intents{}, fmt.Errorf("intents: bad value %q for %s: %w", v, k, err)
		}
	}
	return in, nil
}

func (in *Intents) parsePreference(l Level, v string) error {
	if l == LevelProhibit && (v == "expensive" || v == "constrained") {
		if v == "expensive" {
			in.ProhibitExpensive = true
		} else {
			in.ProhibitConstrained = true
		}
		return nil
	}
	if t := slices.Index(typeNames, v); t > 0 {
		if in.Types == nil {
			in.Types = map[InterfaceType]Level{}
		}
		in.Types[InterfaceType(t)] = l
		return nil
	}
	name, err := parseInterfaceName(v)
	if err != nil {
		return err
	}
	if name == "" {
		return fmt.Errorf("empty interface name")
	}
	if in.Interfaces == nil {
		in.Interfaces = map[string]Level{}
	}
	in.Interfaces[name] = l
	return nil
}

func parseEnum[T ~uint8](dst *T, names []string, key, v string) error {
	i := slices.Index(names, v)
	if i <= 0 { // index 0 is "unspecified", which has no text form
		return fmt.Errorf("want one of %s", strings.Join(names[1:], ", "))
	}
	*dst = T(i)
	return nil
}

type unit struct {
	suffix string
	scale  int64
}

// Longest suffixes first so "KiB" is not read as "B".
var byteUnits = []unit{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

var bitrateUnits = []unit{
	{"kbps", 1e3}, {"Mbps", 1e6}, {"Gbps", 1e9}, {"bps", 1},
}

func parseBytes(v string) (int64, error)   { return parseScaled(v, byteUnits) }
func parseBitrate(v string) (int64, error) { return parseScaled(v, bitrateUnits) }

// parseScaled reads a non-negative decimal number with an optional unit
// suffix. Fractions are allowed when the result is a whole number.
func parseScaled(v string, units []unit) (int64, error) {
	num, scale := v, int64(1)
	if suffix := strings.TrimLeft(v, "0123456789. "); suffix != "" && suffix != v {
		// A number with a unit: one of units, exactly, or say which.
		found := false
		names := make([]string, len(units))
		for i, u := range units {
			if u.suffix == suffix {
				num, scale, found = strings.TrimSpace(strings.TrimSuffix(v, suffix)), u.scale, true
				break
			}
			names[i] = u.suffix
		}
		if !found {
			for _, u := range units {
				if strings.EqualFold(u.suffix, suffix) {
					return 0, fmt.Errorf("unit %q: units are case-sensitive, did you mean %q?", suffix, u.suffix)
				}
			}
			return 0, fmt.Errorf("unknown unit %q (want one of %s)", suffix, strings.Join(names, ", "))
		}
	}
	if num == "" || strings.ContainsAny(num, "+-eExXpP_") {
		return 0, fmt.Errorf("not a non-negative number")
	}
	whole, frac, _ := strings.Cut(num, ".")
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > (1<<63-1)/scale {
		return 0, fmt.Errorf("not a number or out of range")
	}
	total := w * scale
	if frac != "" {
		f, err := strconv.ParseUint(frac, 10, 64)
		if err != nil || len(frac) > 18 {
			return 0, fmt.Errorf("not a number")
		}
		den := uint64(1)
		for range frac {
			den *= 10
		}
		hi, lo := bits.Mul64(f, uint64(scale))
		if hi != 0 || lo%den != 0 {
			return 0, fmt.Errorf("not a whole number of units")
		}
		total += int64(lo / den)
		if total < 0 {
			return 0, fmt.Errorf("out of range")
		}
	}
	return total, nil
}

func formatScaled(n int64, units []unit) string {
	for _, u := range units {
		if u.scale > 1 && n >= u.scale && n%u.scale == 0 {
			return strconv.FormatInt(n/u.scale, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// Largest unit that divides the value exactly, binary before decimal.
var byteFormatUnits = []unit{
	{"TiB", 1 << 40}, {"TB", 1e12}, {"GiB", 1 << 30}, {"GB", 1e9},
	{"MiB", 1 << 20}, {"MB", 1e6}, {"KiB", 1 << 10}, {"KB", 1e3},
}

var bitrateFormatUnits = []unit{{"Gbps", 1e9}, {"Mbps", 1e6}, {"kbps", 1e3}}

func formatBytes(n int64) string   { return formatScaled(n, byteFormatUnits) }
func formatBitrate(n int64) string { return formatScaled(n, bitrateFormatUnits) }

// The DiffServ code points Intents.DSCP maps to.
const (
	dscpDefault = 0  // best effort
	dscpLE      = 1  // lower effort, RFC 8622
	dscpAF21    = 18 // low-latency data, RFC 4594
	dscpAF41    = 34 // multimedia streaming, RFC 4594
)

// DSCP maps the intents to a DiffServ code point, the way TAPS maps its
// capacity profiles: background transfers to Lower Effort (1, RFC 8622),
// streams to AF41 (34, RFC 4594), interactive traffic (timeliness
// interactive, or category query or control) to AF21 (18), everything
// else to the default (0). The Dialer applies it when Dialer.MarkDSCP is
// set.
func (in Intents) DSCP() int {
	switch {
	case in.Timeliness == TimelinessBackground:
		return dscpLE
	case in.Timeliness == TimelinessStream || in.Category == CategoryStream:
		return dscpAF41
	case in.Timeliness == TimelinessInteractive || in.Category == CategoryQuery || in.Category == CategoryControl:
		return dscpAF21
	}
	return dscpDefault
}

// without returns in with p prohibited, for a retry elsewhere.
func (in Intents) without(p *Path) Intents { return in.withLevel(p, LevelProhibit) }

// requiring is in with p required: only p may carry it.
func (in Intents) requiring(p *Path) Intents { return in.withLevel(p, LevelRequire) }

// withLevel is in with l for p (a copy of its interface levels).
func (in Intents) withLevel(p *Path, l Level) Intents {
	ifs := make(map[string]Level, len(in.Interfaces)+1)
	maps.Copy(ifs, in.Interfaces)
	ifs[p.Name] = l
	in.Interfaces = ifs
	return in
}
