package policy

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/sockintents/intents"
)

// EAF is Earliest Arrival First, the Socket Intents prototype's policy: for
// each way to carry a request (each reusable pooled connection, and a new
// connection on each permitted path) it predicts when the last byte of
// SizeToBeReceived arrives (see Model) and picks the earliest. Small
// objects so go to the path with the shortest round trip, large ones to the
// path with the most free capacity. Without a size hint it picks the path
// with the lowest RTT (reusing a free connection there if it can). New
// connections spread over paths that come close (see Decide): each holds
// one of a host's few for the rest of a page.
//
// The other options follow, in order of predicted arrival, as fallbacks.
//
// EAF is also an intents.Mover: a response that turns out far larger than
// the size it was placed for, or that arrives far slower than another path
// would carry it, moves there (see Move). And an intents.Splitter: at a
// page's tail, a response that still owes much shares its rest with a path
// that carries nothing (see Split).
//
// Each rule below gives its reason; the loads that showed them are in
// docs/findings.md, "The traces behind EAF's rules".
type EAF struct {
	Model
}

type option struct {
	choice intents.Choice
	at     time.Duration
	// rank is what options are ordered by: at, weighed by unseenPremium
	// on a path whose capacity is a guess (see options).
	rank time.Duration
	// bet: a wait for a busy connection whose response has not told its
	// size yet, ordered after every other option (see options).
	bet   bool
	mptcp *intents.Path // the joining subflow's path, for an MPTCP option
}

// unseenPremium weighs the predicted arrival of an option on a path that
// has shown nothing of its capacity, while another path has: it goes
// first only where it is predicted sooner by more than a third. Its
// prediction stands on a lent capacity, which may be many times the
// path's own; the small gain of a few milliseconds is not worth the risk
// of a request whose size is itself a guess landing on a slow path.
const unseenPremium = 1.5

// label names o for a reason; built only for the options a reason shows.
// path is the path o's connection is on.
func (o option) path() *intents.Path {
	if o.choice.Reuse != nil {
		return o.choice.Reuse.Path
	}
	return o.choice.Path
}

func (o option) label() string {
	switch {
	case o.mptcp != nil:
		return "mptcp " + o.choice.Path.Name + "+" + o.mptcp.Name
	case o.choice.Reuse != nil:
		return o.choice.Reuse.Path.Name + " reuse #" + strconv.FormatUint(o.choice.Reuse.ID, 10)
	}
	return o.choice.Path.Name + " new"
}

// Decide orders the options by predicted arrival, an option on a path
// that has shown nothing of its capacity weighed by unseenPremium while
// another path has shown its own. A new connection on a path holding
// fewer connections, whose RTT and capacity are measured and that is not
// already full while another path has room, goes first if it comes
// within half again the earliest, a new connection elsewhere (see
// balanceNew). With requests queued behind this one (Request.Queued), an
// idle path goes first if it would have this object in before all that
// load could be done over all paths anyway: arriving earliest on the
// busy path, it would only push the queue's end further out while the
// idle path stays unused (one object at a time while the path's capacity
// is unseen: see exploring). Options on a path whose handshake has not
// answered yet come last while a measured path may be as good (see
// measuredFirst): EAF acts on what it has measured, and on lent values
// only where what it measured is worse.
func (e *EAF) Decide(req *intents.Request, d *intents.Decision) {
	var buf [32]option
	var mbuf [16]pathModel
	models := e.models(req.Paths, mbuf[:0]) // each path's model once: estimates take a lock to read
	opts := e.options(req, models, buf[:0])
	sortByRank(opts)
	spread := balanceNew(req, models, opts)
	opts = e.idleFirst(req, models, opts)
	measuredFirst(req, models, opts)
	for _, o := range opts {
		d.Choices = append(d.Choices, o.choice)
	}
	d.Reason = reason("eaf", req, opts)
	// idleFirst may have put another option first since.
	if req.Explain && spread != nil && opts[0].choice.Path == spread && opts[0].mptcp == nil {
		d.Reason += "; new connections spread: " + spread.Name + " holds fewer"
	}
}

// RacesFirst implements intents.Racer: a request asked while no path
// has shown anything of its capacity is raced over two, if none of them
// has a capacity lent by a prior either. A handshake tells a path's RTT,
// not its rate, and the page's burst is placed on what its first object
// showed: on a first visit the path that answered first got the root
// even at a tenth of the other's rate (the page 1.8 × the other path's
// time alone).
func (e *EAF) RacesFirst(req *intents.Request) bool {
	for _, p := range req.Paths {
		if p.Estimate().Bandwidth > 0 {
			return false
		}
	}
	return len(req.Paths) > 1
}

// moveMargin is how much sooner a response must be predicted to arrive
// elsewhere to be moved there: the model errs, and a move costs the bytes
// already on their way and a connection's set-up.
const moveMargin = 0.25

// Move implements intents.Mover: a response moves if the whole of what it
// still owes (req.Intents.SizeToBeReceived) would arrive sooner, by more
// than a quarter, over a new connection on another path, set-up included,
// than here, where it shares its path with the others' backlog (see
// Model), and if that path holds fewer of the active connections than it
// takes to fill it while every connection would add throughput somewhere
// (see connShares: a long round trip needs more), or, where there are
// connections to spare, fewer than its share of the paths' capacity.
// Where there are to spare and requests for the destination are queued
// (Request.Queued), only to a path it has no connection on: one it has a
// connection on gets the queue's load as its connections free up, and a
// move there only trades a transfer for another, losing the bytes on
// their way here; one it has none on stays idle for as long as the
// connection limit keeps the queue off it. The rate the response has been
// arriving at (Candidate.Rate), a fair share of its path's, tells that
// path's capacity once it is measured: the estimate may still be a guess
// on a first page (a measured capacity bounds it: the connection that
// started first gets more than its share). An idle connection on the
// other path (a page's tail: that path is done) is weighed too: it takes
// the rest in a round trip, with the window its transfers grew. A path
// already carrying its share gets the queued requests' load anyway:
// moving a transfer there would only trade one for another, and lose the
// bytes on their way here. Unless the response is the page's tail: it
// would stay here past the time the other paths need for all the queued
// load, their own backlog and this response together (see othersEnd), so
// that whatever the queue does, the page waits for this one. It then
// moves wherever it arrives sooner by the margin, shares or not. Nor onto
// a path that no transfer has shown anything of its capacity yet, unless
// this one has shown a capacity below what that one is lent: there its
// prediction stands on a lent capacity, and a response moves only once.
func (e *EAF) Move(req *intents.Request, from *intents.Candidate) (*intents.Path, string) {
	size := float64(req.Intents.SizeToBeReceived)
	i := slices.Index(req.Paths, from.Path)
	if i < 0 || size <= 0 || len(req.Paths) < 2 {
		return nil, "eaf: stays (nothing to weigh)"
	}
	var mbuf [16]pathModel
	models := e.models(req.Paths, mbuf[:0])
	here := &models[i]
	others := arriving(here, from)
	stay := others.shared(size, here.transfer(size, here.iw+float64(from.BytesIn)))
	var sbuf [16]pathModel
	var abuf [16]int
	t := moveTargets{e: e, req: req, models: models, i: i, size: size}
	t.weigh(others, stay, sbuf[:0], abuf[:0])
	best, bestAt, bestReuse := -1, 0.0, (*intents.Candidate)(nil)
	for j := range models {
		if !t.eligible(j) {
			continue
		}
		if at, reuse := t.arrival(j); best < 0 || at < bestAt {
			best, bestAt, bestReuse = j, at, reuse
		}
	}
	if best < 0 {
		return nil, "eaf: stays (every other path has its share of the connections)"
	}
	var to *intents.Path
	if bestAt < stay*(1-moveMargin) {
		to = req.Paths[best]
	}
	if !req.Explain {
		return to, "eaf"
	}
	verdict := "stays"
	if to != nil {
		verdict = "moves"
	}
	via := " new"
	if bestReuse != nil {
		via = " reuse #" + strconv.FormatUint(bestReuse.ID, 10)
	}
	return to, "eaf: " + verdict + ": " + req.Paths[best].Name + via + " predicted " + seconds(bestAt).Round(time.Millisecond).String() +
		" vs " + from.Path.Name + " #" + strconv.FormatUint(from.ID, 10) + " " + seconds(stay).Round(time.Millisecond).String() +
		" at " + strconv.FormatFloat(here.cap*8/1e6, 'f', 1, 64) + " Mbit/s" +
		" (" + strconv.FormatInt(req.Intents.SizeToBeReceived, 10) + " B to come)"
}

// moveTargets weighs the other paths a response on path i may move to
// (see Move).
type moveTargets struct {
	e      *EAF
	req    *intents.Request
	models []pathModel
	i      int
	size   float64
	// The paths' connections and capacity, for their shares; the shares
	// of the connections after the move where every connection adds
	// throughput somewhere (scarce); whether the response is the page's
	// tail wherever the queue goes.
	active, capacity float64
	shares           []int
	scarce, tail     bool
}

// weigh sets t's shares and tail, with others the response's path as the
// transfers beside it see it and stay its arrival there.
func (t *moveTargets) weigh(others pathModel, stay float64, sbuf []pathModel, abuf []int) {
	for j := range t.models {
		t.active += t.load(j)
		t.capacity += t.shareCap(&t.models[j])
	}
	// Where every connection adds throughput somewhere (connShares), a
	// path holding fewer than fill it takes the move even while requests
	// queue, and one holding as many does not: the queue would not give
	// it the connections before this path's are done with their bytes.
	afterMove := append(sbuf, t.models...)
	afterMove[t.i].active = others.active
	t.shares, t.scarce = connShares(afterMove, t.size, abuf)
	t.tail = stay > t.e.othersEnd(t.req, t.models, t.i, t.size)
}

// shareCap is a path's capacity for its share of the connections; one
// whose capacity is still a guess is counted as fast as the response's
// path, not faster: a path that turns out no faster, and already busy,
// would gain nothing by a move but lose the bytes on their way.
func (t *moveTargets) shareCap(pm *pathModel) float64 {
	if here := &t.models[t.i]; pm == here || pm.measured {
		return pm.cap
	}
	return t.models[t.i].cap
}

// load is path j's connections, or the requests in flight on the
// destination's connections there if more: an HTTP/3 connection carries
// many at once.
func (t *moveTargets) load(j int) float64 {
	var inFlight float64
	for k := range t.req.Candidates {
		if t.req.Candidates[k].Path == t.req.Paths[j] {
			inFlight += float64(t.req.Candidates[k].InFlight)
		}
	}
	return max(t.models[j].active, inFlight)
}

// eligible reports whether the response may move to path j.
func (t *moveTargets) eligible(j int) bool {
	pm, here := &t.models[j], &t.models[t.i]
	if j == t.i || (pm.unseen && !(here.measured && here.cap < pm.cap)) {
		return false
	}
	switch {
	case t.tail:
		return true
	case t.scarce:
		return pm.active < float64(t.shares[j])
	}
	return !(t.active > 0 && t.load(j)/t.active >= t.shareCap(pm)/t.capacity) && !(t.req.Queued > 0 && hasConn(t.req, t.req.Paths[j]))
}

// arrival is when the response's rest would arrive over path j: on a new
// connection, or on an idle one there (a page's tail: its path is done
// while this one still carries), which takes it in a round trip with the
// window its transfers grew; the Transport moves onto that one.
func (t *moveTargets) arrival(j int) (float64, *intents.Candidate) {
	pm := &t.models[j]
	at, reuse := t.e.setupRTTs(true, t.req.Dest.TLS)*pm.rtt+pm.shared(t.size, pm.transfer(t.size, pm.iw)), (*intents.Candidate)(nil)
	for k := range t.req.Candidates {
		if c := &t.req.Candidates[k]; c.Path == t.req.Paths[j] && c.Available > 0 && c.InFlight == 0 {
			if r := t.e.reuse(*pm, c, t.size); r < at {
				at, reuse = r, c
			}
		}
	}
	return at, reuse
}

// othersEnd is when the paths other than i would be done with the
// destination's queued load (Request.Queued), their own backlog and size
// bytes more, at their summed capacity, after a new connection's set-up
// on the nearest of them: a response that would stay on path i past that
// is the page's tail wherever the queue goes (see Move).
func (e *EAF) othersEnd(req *intents.Request, models []pathModel, i int, size float64) float64 {
	var capacity, load float64
	rtt := -1.0
	for j, pm := range models {
		if j == i {
			continue
		}
		capacity += pm.cap
		load += pm.pending
		if rtt < 0 || pm.rtt < rtt {
			rtt = pm.rtt
		}
	}
	if capacity <= 0 {
		return math.Inf(1)
	}
	return e.setupRTTs(true, req.Dest.TLS)*rtt + (float64(req.Queued)+load+size)/capacity
}

// arriving sets the model of the path a response arrives on (here) by the
// rate it has been arriving at, and returns the path as the transfers
// beside it see it (the backlog the response shares the path with).
func arriving(here *pathModel, from *intents.Candidate) pathModel {
	if from.Rate > 0 {
		// Its fair share of the path's capacity; a measured capacity
		// bounds it, as a connection that started first got more than
		// its share.
		c := float64(from.Rate) / 8 * max(here.active, 1)
		if here.measured {
			c = min(c, here.cap)
		}
		here.cap, here.free, here.measured = c, c, true
	}
	others := *here
	others.pending = max(here.pending-float64(from.Pending), 0)
	others.active = max(here.active-1, 0)
	return others
}

// halfPartBDPs is how many of a path's bandwidth-delay products half a
// part must be for EAF to ask a path whose capacity is a guess for half
// first (see Split): below it, halving cost more than it gained (see
// docs/findings.md).
const halfPartBDPs = 4

// splitMargin is how much sooner the two parts of a split response must
// be predicted to be in than the whole where it is: the model errs, and a
// split costs a request, and the bytes on their way beyond the first part
// when its connection closes.
const splitMargin = 0.2

// Split implements intents.Splitter: at a page's tail (no requests queued
// for the destination) the last part of a response goes to a path with no
// transfers in progress if both parts, the first where it is and the last
// there, would be in sooner by more than a fifth than the whole where it
// is (at the rate it has been arriving at, once that is known:
// Candidate.Rate; a first part that then turns out slow may still move,
// see Move). The part is the one that makes both arrive together: over an
// idle connection the destination has there (a round trip, with the
// window its transfers grew), or a new one, set-up included; half that
// where the path has shown nothing of its capacity yet, if the half is
// still many times the path's bandwidth-delay product (the next part,
// asked once this one is in, is sized on what the path showed). While
// requests queue, a path's connections get those; a busy path's transfers
// would share their capacity with the part.
func (e *EAF) Split(req *intents.Request, from *intents.Candidate) (*intents.Path, int64, string) {
	size := float64(req.Intents.SizeToBeReceived)
	i := slices.Index(req.Paths, from.Path)
	switch {
	case i < 0 || size <= 0 || len(req.Paths) < 2:
		return nil, 0, "eaf: whole (nothing to weigh)"
	case req.Queued > 0:
		return nil, 0, "eaf: whole (requests queued: the other paths' connections take those)"
	}
	var mbuf [16]pathModel
	models := e.models(req.Paths, mbuf[:0])
	here := &models[i]
	others := arriving(here, from)
	window := here.iw + float64(from.BytesIn)
	stayFor := func(n float64) float64 { return others.shared(n, here.transfer(n, window)) }
	stay := stayFor(size)
	best, bestPart, bestAt, guessed := -1, 0.0, 0.0, false
	for j := range models {
		if j == i || models[j].active > 0 {
			continue // a busy path's transfers would only share their capacity with the part
		}
		pm := models[j]
		hi, at := e.splitAt(req, req.Paths[j], pm, size, stayFor)
		if best < 0 || at < bestAt {
			// Half first where the path's capacity is a guess, if the
			// half is still many of its bandwidth-delay products: each
			// part costs its connection a round trip and some slow
			// start, which a few products' worth is mostly.
			guessed = pm.unseen && hi/2 >= halfPartBDPs*pm.cap*pm.rtt
			best, bestPart, bestAt = j, hi, at
		}
	}
	if best < 0 {
		return nil, 0, "eaf: whole (no other path is idle)"
	}
	if bestAt >= stay*(1-splitMargin) {
		if !req.Explain {
			return nil, 0, "eaf"
		}
		return nil, 0, "eaf: whole: " + from.Path.Name + " #" + strconv.FormatUint(from.ID, 10) + " predicted " +
			seconds(stay).Round(time.Millisecond).String() + ", split at best " + seconds(bestAt).Round(time.Millisecond).String()
	}
	part, share := int64(bestPart), ""
	if guessed {
		// A path that has shown nothing of its capacity is lent one (see
		// Model), which may be far above its own: a part too large for
		// it arrives after the first part and is dropped whole. Half of
		// it first: once it is in, the path has shown its capacity, or
		// at least a floor, and the next part is sized on that.
		part, share = part/2, " (half: its capacity is not known yet)"
	}
	if !req.Explain {
		return req.Paths[best], part, "eaf"
	}
	return req.Paths[best], part, "eaf: splits: the last " + strconv.FormatInt(part, 10) + " B on " + req.Paths[best].Name + share +
		", both parts predicted " + seconds(bestAt).Round(time.Millisecond).String() + " vs " + from.Path.Name + " #" +
		strconv.FormatUint(from.ID, 10) + " " + seconds(stay).Round(time.Millisecond).String() + " whole (" +
		strconv.FormatInt(req.Intents.SizeToBeReceived, 10) + " B to come)"
}

// splitAt is the part of a response's size bytes that an idle path p
// (modelled by pm) would take, and when both parts would be in: where
// the first part's time on its own path (stayFor), falling as the part
// grows, meets the part's on p, over a new connection or an idle one
// there, rising.
func (e *EAF) splitAt(req *intents.Request, p *intents.Path, pm pathModel, size float64, stayFor func(float64) float64) (part, at float64) {
	var idle []*intents.Candidate // looked up once: the bisection asks thereFor 40 times
	for k := range req.Candidates {
		if c := &req.Candidates[k]; c.Path == p && c.Available > 0 && c.InFlight == 0 {
			idle = append(idle, c)
		}
	}
	thereFor := func(n float64) float64 {
		at := e.setupRTTs(true, req.Dest.TLS)*pm.rtt + pm.shared(n, pm.transfer(n, pm.iw))
		for _, c := range idle {
			at = min(at, e.reuse(pm, c, n))
		}
		return at
	}
	lo, hi := 0.0, size
	for range 40 {
		mid := (lo + hi) / 2
		if stayFor(size-mid) > thereFor(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi, max(stayFor(size-hi), thereFor(hi))
}

// hasConn reports whether req's destination has a connection on p.
func hasConn(req *intents.Request, p *intents.Path) bool {
	for i := range req.Candidates {
		if req.Candidates[i].Path == p {
			return true
		}
	}
	return false
}

// sortByRank sorts opts by rank (their predicted arrival, weighed: see
// options), stably. A decision has a
// handful of options: an insertion sort that compares in line is several
// times faster there than a sort calling a comparison function.
func sortByRank(opts []option) {
	if len(opts) > 16 {
		slices.SortStableFunc(opts, compareRank)
		return
	}
	for i := 1; i < len(opts); i++ {
		for j := i; j > 0 && compareRank(opts[j], opts[j-1]) < 0; j-- {
			opts[j], opts[j-1] = opts[j-1], opts[j]
		}
	}
}

// compareRank orders options by rank, bets after the others.
func compareRank(a, b option) int {
	if a.bet != b.bet {
		if a.bet {
			return 1
		}
		return -1
	}
	return cmp.Compare(a.rank, b.rank)
}

// options lists every way to carry req with its predicted arrival. Without
// a size hint the prediction is the path's RTT alone. With one, an option
// on a path whose capacity is a guess while another path's is not ranks
// by its arrival weighed by unseenPremium, unless every path that has
// shown its capacity has shown one below what the guessed one is lent.
func (e *EAF) options(req *intents.Request, models []pathModel, opts []option) []option {
	size := float64(req.Intents.SizeToBeReceived)
	model := func(p *intents.Path) pathModel {
		for i, q := range req.Paths {
			if q == p {
				return models[i]
			}
		}
		return e.path(p)
	}
	weigh := size > 0 && slices.ContainsFunc(models, seen) && !knownSlower(models, unseen)
	ranked := func(o option, pm pathModel) option {
		o.rank = o.at
		if weigh && pm.unseen {
			o.rank = time.Duration(float64(o.at) * unseenPremium)
		}
		return o
	}
	for i := range req.Candidates {
		c := &req.Candidates[i]
		if c.Path == nil {
			continue
		}
		// Without a size hint: its wait and a round trip.
		pm := model(c.Path)
		at := e.reuse(pm, c, size)
		o := ranked(option{choice: intents.Choice{Reuse: c}, at: seconds(at)}, pm)
		// A busy connection whose response has not sent its headers owes
		// a size that is only its request's hint: waiting for it may cost
		// any length of body, a new connection a round trip more than the
		// best case. Waited for only where nothing else can be had (the
		// pool's limit: there a new connection is no option).
		o.bet = c.Available == 0 && c.InFlight > 0 && !c.Answered
		opts = append(opts, o)
	}
	for i, p := range req.Paths {
		pm := models[i]
		at := seconds(e.setupRTTs(true, req.Dest.TLS)*pm.rtt + pm.shared(size, pm.transfer(size, pm.iw)))
		if size == 0 {
			at = seconds(pm.rtt) + time.Nanosecond // a free connection there comes first
		}
		opts = append(opts, ranked(option{choice: intents.Choice{Path: p, Fresh: true}, at: at}, pm))
	}
	return opts
}

// idleFirst moves to the front the earliest option on a path that is
// below its share of the load, if it arrives before the queue's fluid end:
// all bytes in flight and queued at the summed capacity of the paths. A
// path is below its share when it holds fewer active connections than
// fill it while every connection would add throughput somewhere (see
// connShares); where there are connections to spare, when its bytes in
// flight, this object's included, are no larger a part of all bytes in
// flight than its capacity is of the paths' (an idle path always is).
// Arriving earliest on the busy path, the object would only push the
// queue's end further out while the other path carries less than it
// could; and with the page's requests spread so, each path's connections
// keep busy until the end. Only objects that would load the best path's
// capacity move (see below).
func (e *EAF) idleFirst(req *intents.Request, models []pathModel, opts []option) []option {
	if req.Queued <= 0 || len(opts) < 2 || req.Intents.SizeToBeReceived <= 0 {
		return opts
	}
	var load, capacity float64
	rtt := models[0].rtt
	for _, pm := range models {
		load += pm.pending
		capacity += pm.cap
		rtt = min(rtt, pm.rtt)
	}
	if capacity <= 0 {
		return opts
	}
	size := float64(req.Intents.SizeToBeReceived)
	// An object smaller than the best path's bandwidth-delay product costs
	// it round trips, not capacity: sent elsewhere it would spare the busy
	// path next to nothing and hold one of the host's few connections for
	// the idle path's longer set-up and transfer.
	if i := slices.Index(req.Paths, opts[0].path()); i >= 0 {
		if best := models[i]; size < best.cap*best.rtt {
			return opts
		}
	}
	var abuf [16]int
	conns, scarce := connShares(models, size, abuf[:0])
	belowShare := func(p *intents.Path) bool {
		i := slices.Index(req.Paths, p)
		if i < 0 {
			return false
		}
		pm := models[i]
		if int(pm.active) < conns[i] {
			return true
		}
		if scarce {
			return false // another path needs this connection more
		}
		return pm.pending <= 0 || (pm.pending+size)/(load+size) <= pm.cap/capacity
	}
	end := max(opts[0].at, seconds(rtt+(load+float64(req.Queued)+size)/capacity))
	for i, o := range opts {
		// Waiting for a busy connection adds nothing: a new or a free
		// connection carries a path's share.
		busy := o.choice.Reuse != nil && o.choice.Reuse.Available == 0
		if busy || o.mptcp != nil || !belowShare(o.path()) || exploring(req, models, o.path()) {
			continue
		}
		if i == 0 {
			return opts // the earliest is on a path below its share already
		}
		if o.at <= end {
			return append(append([]option{o}, opts[:i]...), opts[i+1:]...)
		}
	}
	return opts
}

// measuredFirst moves, in place and keeping their order, the options on
// paths whose RTT is lent (no handshake there has answered yet) after the
// others, if some permitted path's RTT is measured and that path may be
// as good: not where every path with a measured RTT has shown a capacity
// below what the others are lent, for then the lent values are the better
// bet. The lent RTT is a guess (UnknownRTT, or the lowest measured), and
// so is a capacity no transfer has shown: on them a far path looks as
// near as the measured one, and a request sent there waits the path's
// real round trips while holding one of the host's connections. The
// handshake already under way there (a spare connection's, or a bare one:
// see Transport) tells the RTT within one of it, and the requests still
// waiting then are placed on it.
func measuredFirst(req *intents.Request, models []pathModel, opts []option) {
	guessed := func(o option) bool {
		p := o.choice.Path
		if o.choice.Reuse != nil {
			p = o.choice.Reuse.Path
		}
		i := slices.Index(req.Paths, p)
		return i >= 0 && models[i].rttGuessed
	}
	if !slices.ContainsFunc(models, rttMeasured) || knownSlower(models, rttGuessed) {
		return
	}
	// A stable partition: a handful of options, moved by insertion.
	n := 0 // measured options so far, at the front
	for i, o := range opts {
		if guessed(o) {
			continue
		}
		copy(opts[n+1:i+1], opts[n:i])
		opts[n] = o
		n++
	}
}

// knownSlower reports whether there are paths that guessed says are not
// a guess and every one of them has shown a capacity below the highest
// that a guessed one is lent: then the lent values, optimistic as they
// are, are the better bet (see measuredFirst, options and exploring).
func knownSlower(models []pathModel, guessed func(pathModel) bool) bool {
	var lent float64
	for _, pm := range models {
		if guessed(pm) {
			lent = max(lent, pm.cap)
		}
	}
	known := false
	for _, pm := range models {
		if !guessed(pm) {
			if !(pm.measured && pm.cap < lent) {
				return false
			}
			known = true
		}
	}
	return known
}

// exploring reports whether p is one of req's paths that no transfer has
// shown anything of its capacity yet, not even a floor, while one is in
// progress there: that one will show it, and until then the path's
// arrivals, and the queue's end they are weighed against, stand on lent
// capacities. idleFirst sends a path so one object at a time. Not where
// every path that has shown its capacity has shown one below what the
// unseen path is lent: the unseen one is then the better bet (see
// docs/findings.md).
func exploring(req *intents.Request, models []pathModel, p *intents.Path) bool {
	i := slices.Index(req.Paths, p)
	return i >= 0 && models[i].unseen && models[i].pending > 0 && !knownSlower(models, unseen)
}

// Predicates on a path's model, for knownSlower and slices' searches: its
// capacity lent or shown, its RTT lent or measured.
func unseen(pm pathModel) bool      { return pm.unseen }
func seen(pm pathModel) bool        { return !pm.unseen }
func rttGuessed(pm pathModel) bool  { return pm.rttGuessed }
func rttMeasured(pm pathModel) bool { return !pm.rttGuessed }

// balanceMargin is how much later a new connection on a path holding
// fewer connections may be predicted to arrive than the earliest option, a
// new connection elsewhere, and still go first (see balanceNew).
const balanceMargin = 0.5

// balanceNew puts first, in place, a new connection on a path holding
// fewer active connections (dials included) than the path of the earliest
// option, if that is a new connection too and the other is predicted
// within balanceMargin of it; it returns that path, or nil. A new
// connection holds one of the host's few for the rest of a page, whose
// objects are mostly of unknown size when its first connections open (a
// browser asks for them all at once): given to the path that is a little
// sooner for this object, all of them go to one path, and what follows,
// large or not, queues there while the other path idles. Spread where the
// paths come close, they carry what follows on both. Where one path is
// far slower for every object (a 200 ms path beside a 10 ms one), its new
// connections are never that close. Nor is a path whose RTT is not
// measured yet: its prediction stands on a lent RTT, and a path whose
// handshake (a spare connection's, opened with the page's first) has not
// answered by the time the page's requests come, a root document's round
// trips later, is far. Nor is a path that no transfer has shown anything
// of its capacity yet, not even a floor: its prediction stands on a lent
// capacity, and a page's burst spread onto a slow path on the capacity
// lent it fills that path's queue for long (see docs/findings.md). Nor
// is a path that holds the connections that fill it for objects of this
// size while another path has room (see holdsItsShare).
func balanceNew(req *intents.Request, models []pathModel, opts []option) *intents.Path {
	if len(opts) < 2 || opts[0].choice.Path == nil || opts[0].mptcp != nil {
		return nil
	}
	a := slices.Index(req.Paths, opts[0].choice.Path)
	if a < 0 {
		return nil
	}
	limit := seconds(opts[0].at.Seconds() * (1 + balanceMargin))
	for i := 1; i < len(opts); i++ {
		o := opts[i]
		if o.at > limit {
			break // sorted: the rest are later still
		}
		if o.choice.Path == nil || o.mptcp != nil {
			continue
		}
		if b := slices.Index(req.Paths, o.choice.Path); b >= 0 && models[b].active < models[a].active && !models[b].rttGuessed && !models[b].unseen && !holdsItsShare(req, models, b) {
			copy(opts[1:i+1], opts[:i])
			opts[0] = o
			return o.choice.Path
		}
	}
	return nil
}

// holdsItsShare reports whether path b holds as many active connections
// as connShares gives it for objects of req's size, while the paths'
// connections are scarce (another path would still gain by one). A new
// connection there would only share a full path's capacity, and hold one
// of the host's few for the rest of the page while the path with room
// waits for them. Where every path is full, connections are spread by
// count as before: a page of small objects is served sooner over more
// connections than fill a path (each request costs a round trip on
// HTTP/1.1).
func holdsItsShare(req *intents.Request, models []pathModel, b int) bool {
	size := float64(req.Intents.SizeToBeReceived)
	if size <= 0 {
		return false
	}
	var abuf [16]int
	shares, scarce := connShares(models, size, abuf[:0])
	return scarce && models[b].active >= float64(shares[b])
}

// connShares splits the connections in use on the paths, and one more
// for the request being placed, so that each adds the most throughput for
// objects of size bytes: a connection carries one object per round trip
// and transfer (size / (RTT + size / capacity)), and a path takes as many
// as fill its capacity. A long round trip needs more of them: a 200 ms
// path of 20 Mbit/s takes six 100 kB transfers at a time to fill, a 20 ms
// path of 6 Mbit/s one or two. Counting connections, not bytes, keeps a
// short path from holding all of a host's few connections while a long
// one, faster in all, waits for them. scarce says every connection is
// needed somewhere; if not, those beyond what fills every path are left
// unassigned (the bytes in flight share them, see idleFirst).
func connShares(models []pathModel, size float64, dst []int) (shares []int, scarce bool) {
	var total int
	for _, pm := range models {
		total += int(pm.active)
		dst = append(dst, 0)
	}
	for range total + 1 {
		best, bestGain := -1, 0.0
		for j, pm := range models {
			if pm.cap <= 0 {
				continue
			}
			per := size / (pm.rtt + size/pm.cap)
			n := float64(dst[j])
			if gain := min(pm.cap, (n+1)*per) - min(pm.cap, n*per); gain > bestGain {
				best, bestGain = j, gain
			}
		}
		if best < 0 {
			return dst, false // every path full
		}
		dst[best]++
	}
	return dst, true
}

// reason explains the decision from its options, best first, if someone
// will read it (Request.Explain); else it is the policy's name: building
// it is most of what a decision allocates.
func reason(name string, req *intents.Request, opts []option) string {
	if len(opts) == 0 {
		return name + ": no options"
	}
	if !req.Explain {
		return name
	}
	size := req.Intents.SizeToBeReceived
	what := "size " + strconv.FormatInt(size, 10) + " B"
	if size == 0 {
		what = "no size hint: lowest RTT"
	}
	r := name + ": " + opts[0].label() + " predicted " + opts[0].at.Round(time.Millisecond).String()
	if len(opts) > 1 {
		r += " vs " + opts[1].label() + " " + opts[1].at.Round(time.Millisecond).String()
	}
	return r + " (" + what + ")"
}

// EAFMPTCP is EAF that also predicts a new Multipath TCP connection over
// every ordered pair of permitted paths (first subflow, then one joining
// subflow; see Model.MPTCP) and chooses MPTCP only where it arrives
// earliest by more than Margin. The first subflow always goes on the path
// predicted best for a single connection: the paper saw up to tenfold
// slowdowns from a badly placed first subflow.
type EAFMPTCP struct {
	Model
	// Margin is how much earlier MPTCP must be predicted to finish to be
	// chosen, as a fraction (default 0.1): its set-up and scheduling cost
	// more than the model says.
	Margin float64
}

// Decide orders the options by predicted arrival, MPTCP ones included.
func (e *EAFMPTCP) Decide(req *intents.Request, d *intents.Decision) {
	eaf := EAF{Model: e.Model}
	var buf [32]option
	var mbuf [16]pathModel
	opts := eaf.options(req, eaf.models(req.Paths, mbuf[:0]), buf[:0])
	sortByRank(opts)
	size := req.Intents.SizeToBeReceived
	if size > 0 && req.Intents.Multipath != intents.MultipathOff && len(req.Paths) > 1 {
		// The first subflow goes where a single new connection does best.
		var first *intents.Path
		for _, o := range opts {
			if o.choice.Path != nil {
				first = o.choice.Path
				break
			}
		}
		margin := e.Margin
		if margin <= 0 {
			margin = 0.1
		}
		best := option{at: -1}
		for _, second := range req.Paths {
			if second == first {
				continue
			}
			at := e.MPTCP(first, second, size, req.Dest.TLS)
			if best.at < 0 || at < best.at {
				best = option{choice: intents.Choice{Path: first, MPTCP: true, Fresh: true}, at: at, rank: at, mptcp: second}
			}
		}
		if best.at >= 0 && float64(best.at) < float64(opts[0].at)*(1-margin) {
			opts = append([]option{best}, opts...)
		}
	}
	for _, o := range opts {
		d.Choices = append(d.Choices, o.choice)
	}
	d.Reason = reason("eafmptcp", req, opts)
}
