package intents

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// A Policy chooses how a communication unit is carried: reuse a pooled
// connection, open a new one on a path (with or without MPTCP), leave it to
// the operating system, or wait. Built-in policies live in package
// intents/policy.
//
// Decide appends its choices to d.Choices, best first, and sets d.Reason.
// It sees only permitted paths (preferences are applied before), so no policy
// can pick a prohibited path.
//
// Decide runs without any lock of the pool's held, on a snapshot of the
// pool: requests to other destinations, and other decisions, go on
// meanwhile, and its choices are checked against the pool as it is once it
// returns (a connection taken or closed meanwhile is passed over for the
// next choice). So Decide may read its own state under locks of its own
// and may log; it must be safe for concurrent use, must not keep req or d
// (nor slices of them) after it returns, and should not block: the request
// waits for it, and so do the others queued behind it.
type Policy interface {
	Decide(req *Request, d *Decision)
}

// A Mover is a Policy that may also move a response to another path once
// its headers show it far larger than the size its connection was chosen
// for: a size predicted before any of it was known (a Transport's guess
// from the origin's earlier responses) places a large object as a small
// one, on the path with the shortest round trip, which may be the one
// that will take longest to carry it. The Transport asks Move then; if it
// names another path, the response is abandoned unread (its connection is
// closed, and a new connection on that path takes its place in the pool's
// limits, or a free one the destination has there takes the request; on
// HTTP/3 only its stream ends, and it goes to a connection on that path
// as the policy decides there) and the request is sent again
// there, so the caller gets the second response, whole and of one
// version. Move is asked again as the body arrives (at most every tenth
// of a second) and, on Linux, while its connection receives nothing (for
// three of its path's minimum RTTs): there the rest is asked for by range
// on the path Move names, and the connection closes. Only a GET without a
// body is moved, only from an HTTP/1 connection bound to a path or an
// HTTP/3 one it has to itself, and only once as its bytes arrive (the
// response sent again there still resumes by range if that path goes
// down, as one that did not move does, and leaves a connection gone
// quiet as the first would). Policies that do not implement Mover never
// move anything.
type Mover interface {
	Policy
	// Move returns the path to fetch the response on instead, or nil to
	// keep it where it is, and why. req is as for Decide, with
	// Intents.SizeToBeReceived the response's length; from is the
	// connection it arrives on (one of req.Candidates), the response
	// counted in its Pending. Move is called as Decide is, and must be
	// as safe.
	Move(req *Request, from *Candidate) (to *Path, reason string)
}

// A Racer is a Policy whose decisions stand on the paths' estimates, and
// which has the Transport race a first request while no path has shown
// its capacity (see Transport.DisableFirstRace): the request goes on the
// first two paths of its decision at once, and what the race shows is
// what the decisions after it weigh. A policy that is not a Racer (one
// that decides by rules, say) is obeyed as it decides.
type Racer interface {
	Policy
	// RacesFirst reports whether req, asked while no path has shown its
	// capacity, is to be raced. It is called as Decide is, and must be
	// as safe.
	RacesFirst(req *Request) bool
}

// A Splitter is a Mover that may also share the rest of a response with
// another path instead of moving all of it: the last part bytes are asked
// for there with a range request while the first ones keep arriving where
// they are, and once those are in the connection they came on closes (the
// server is sending the rest there too). At a page's tail one path is
// often done while a transfer on another still owes much: a move would
// leave the first path idle and lose what is on its way, a split keeps
// both carrying. The Transport asks Split before Move, on the responses a
// Mover could move mid-way (HTTP/1, a strong validator, byte ranges
// accepted), and Move where Split names no path; the first part may still
// move. Once a part is all in, Split is asked again at once, for the first
// part's rest: parts come in turn, each just before the one before, so a
// policy may ask a small part first where a path's rate is a guess, and
// size the next on what the first showed (at most four parts, and 4 MiB
// in all, per response). A split is made only if the destination can have
// a connection on that path at once (a free one, room under the limits,
// or an idle one to close for it): a part that waited for one would come
// too late. The parts are fetched into memory while the first bytes are
// read; if by the time those are in a part has not arrived faster than
// they have since it was asked for (or its answer has not begun, or is not
// the part asked for, of the same version), it is abandoned and its bytes
// come where the first part's did, then the parts after it.
type Splitter interface {
	Mover
	// Split returns the path to fetch the last part bytes of the response
	// over, or nil to keep it whole, and why. req and from are as for
	// Move: Intents.SizeToBeReceived is what the response still owes.
	Split(req *Request, from *Candidate) (to *Path, part int64, reason string)
}

// PolicyFunc adapts a function to the Policy interface.
type PolicyFunc func(req *Request, d *Decision)

// Decide calls f(req, d).
func (f PolicyFunc) Decide(req *Request, d *Decision) { f(req, d) }

// Destination is where a communication unit goes.
type Destination struct {
	Network string // "tcp", "tcp4", "tcp6", "udp", ...
	Host    string // name or literal address, without port
	Port    uint16
	TLS     bool
}

// Candidate is a pooled connection to the destination. Busy candidates
// (Available 0) are listed too, so a policy can weigh waiting for one.
type Candidate struct {
	ID        uint64
	Path      *Path // nil: a connection the operating system routed
	MPTCP     bool
	Available int           // requests it can take now (0: busy)
	InFlight  int           // requests in progress on it
	Idle      time.Duration // time since it was last used
	Age       time.Duration // time since it was opened
	// BytesIn and BytesOut are what it has received and sent so far: a
	// connection that has received much has a congestion window to match.
	BytesIn  int64
	BytesOut int64
	// Pending is how many bytes are still expected on it: the size hints of
	// its requests in flight less what has arrived. A busy connection frees
	// up when they are in.
	Pending int64
	// Answered says that the response to its last request has sent its
	// headers: Pending then counts that body's own length, where before it
	// is the request's size hint, a guess.
	Answered bool
	// Waiting counts the requests already waiting for this connection, and
	// WaitingBytes their size hints: each takes a round trip of its own
	// before a new one's turn (HTTP/1.1 carries one request at a time).
	Waiting      int
	WaitingBytes int64
	// Rate, on the connection a Mover is asked about, is the rate in
	// bits/s at which its response has arrived so far, over a few round
	// trips at least (0: not measured yet): what it will likely get while
	// the path's load stays as it is.
	Rate int64
}

// Request is one decision's input.
type Request struct {
	Intents Intents
	Dest    Destination
	// Paths are the permitted paths in preference order: preferred, then
	// neutral, then avoided, each group in table order. Never empty.
	Paths []*Path
	// Candidates are reusable pooled connections (none for a plain dial).
	Candidates []Candidate
	// Queued is what the other requests waiting for this destination at
	// the pool's limits expect to receive (by their size hints): load
	// still to come, such as the rest of a page whose requests were all
	// made at once. Decisions are made as connections free up, so without
	// it a policy sees only the transfers in flight. Where nothing waits
	// in the pool but the caller keeps a fixed number of requests in
	// flight and sends the next as soon as a response ends (a browser
	// through a proxy), it is a guess: once two such refills came in a
	// row, as many requests as it sent since it last paused, at this one's
	// size, up to four rounds of its other requests in flight.
	Queued int64
	// Explain says that someone will read Decision.Reason (a decision
	// trace, a debug log). When it is false a policy may give a short
	// reason (its name, say) and save what building a full one costs.
	Explain bool
}

// Choice is one option of a Decision.
type Choice struct {
	// Reuse, if set, is one of Request.Candidates (a pointer into the
	// slice, or to a copy: its ID tells which): reuse that connection
	// (wait for it, if it is busy: while a new connection could be opened
	// instead, at most a second for all the busy connections a request
	// waits for, then the next choice that is not a busy connection; its
	// response body may be held unread by the very caller that waits).
	Reuse *Candidate
	// Path, if set (and Reuse nil), sends on this path: over a free pooled
	// connection on it if there is one (unless Fresh), else a new one.
	// Both nil means: leave the path to the operating system's routing.
	Path *Path
	// Fresh asks for a new connection even when a pooled one is free.
	Fresh bool
	// MPTCP asks for a Multipath TCP connection whose first subflow is on Path.
	MPTCP bool
	// Wait asks to wait until a pooled connection frees up.
	Wait bool
}

// String describes c for logs, e.g. "new on wlan0" or "reuse #3 on eth0".
func (c Choice) String() string {
	switch {
	case c.Wait:
		return "wait"
	case c.Reuse != nil:
		return fmt.Sprintf("reuse #%d on %s", c.Reuse.ID, c.Reuse.Path)
	case c.Path != nil && c.MPTCP:
		return "new mptcp on " + c.Path.Name
	case c.Path != nil:
		return "new on " + c.Path.Name
	default:
		return "system routing"
	}
}

// Decision is a policy's output: choices, best first, and why.
type Decision struct {
	Choices []Choice
	Reason  string
}

// effectiveLevel is the level of p under in: the interface name's level wins
// over the type's.
func effectiveLevel(in *Intents, p *Path) (Level, string) {
	if l, ok := in.Interfaces[p.Name]; ok && l != LevelNone {
		return l, p.Name
	}
	if l, ok := in.Types[p.Type]; ok && l != LevelNone {
		return l, p.Type.String()
	}
	return LevelNone, ""
}

func requiresAny(in *Intents) bool {
	for _, l := range in.Interfaces {
		if l == LevelRequire {
			return true
		}
	}
	for _, l := range in.Types {
		if l == LevelRequire {
			return true
		}
	}
	return false
}

// permit returns the paths that in allows for dest, in preference order,
// and why each other path was left out. loopback says whether the
// destination is a loopback address or name:
// loopback destinations are reachable only over loopback paths, others only
// over the rest.
func permit(in *Intents, paths []*Path, family byte, loopback bool) ([]*Path, []Exclusion) {
	var excl []Exclusion
	required := requiresAny(in)
	var dst []*Path
	for _, p := range paths {
		l, by := effectiveLevel(in, p)
		var why string
		switch {
		case l == LevelProhibit:
			why = "prohibited (prohibit=" + by + ")"
		case required && l != LevelRequire:
			why = "not required (require= names other paths)"
		case p.Expensive && (in.ProhibitExpensive || in.Cost == CostNoExpense):
			why = "expensive (prohibit=expensive or cost=noexpense)"
		case p.Constrained && in.ProhibitConstrained:
			why = "constrained (prohibit=constrained)"
		case !p.Up:
			why = "down"
		case (p.Type == TypeLoopback) != loopback:
			if loopback {
				why = "cannot reach a loopback destination"
			} else {
				why = "loopback cannot reach the destination"
			}
		case !hasFamily(p, family):
			why = "no usable " + familyName(family) + " address"
		}
		if why != "" {
			excl = append(excl, Exclusion{Path: p.Name, Reason: why})
			continue
		}
		dst = append(dst, p)
	}
	rank := func(p *Path) int {
		l, _ := effectiveLevel(in, p)
		switch {
		case l == LevelAvoid || (p.Expensive && in.Cost == CostOptimize):
			return 2
		case l == LevelPrefer || l == LevelRequire:
			return 0
		}
		return 1
	}
	slices.SortStableFunc(dst, func(a, b *Path) int { return rank(a) - rank(b) })
	return dst, excl
}

// family: 4, 6 or 0 (either).
func networkFamily(network string) byte {
	switch {
	case strings.HasSuffix(network, "4"):
		return 4
	case strings.HasSuffix(network, "6"):
		return 6
	}
	return 0
}

func familyName(f byte) string {
	switch f {
	case 4:
		return "IPv4"
	case 6:
		return "IPv6"
	}
	return "IP"
}

func hasFamily(p *Path, family byte) bool {
	for _, a := range p.Addrs {
		if family == 0 || (family == 4) == a.Is4() {
			return true
		}
	}
	return false
}

func isLoopbackHost(host string) bool {
	if host == "" {
		return false
	}
	// Every loopback address starts with a digit, a colon or a bracket;
	// testing that first spares parsing host names.
	if c := host[0]; c == '[' || c == ':' || (c >= '0' && c <= '9') {
		a, err := netip.ParseAddr(strings.Trim(host, "[]"))
		return err == nil && a.Unmap().IsLoopback()
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}
