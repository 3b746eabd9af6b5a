package intents

import (
	"context"
	"net/http"

	"github.com/sockintents/intents/mptcp"
)

// aggregateConfig is the configuration to fetch req in ranges with, if
// it may be: Transport.Aggregate, or the defaults for a request whose
// intents ask for multipath=aggregate where MPTCP is not available. Only a
// plain GET without a body or a Range header, multipath not turned off,
// and no size hint below MinSize.
func (t *Transport) aggregateConfig(req *http.Request) (Aggregate, bool) {
	in, _ := FromContext(req.Context())
	return t.aggregateConfigFor(req, &in)
}

// aggregateConfigFor is aggregateConfig with req's intents read already.
func (t *Transport) aggregateConfigFor(req *http.Request, in *Intents) (Aggregate, bool) {
	if (req.Method != http.MethodGet && req.Method != "") || req.URL == nil {
		return Aggregate{}, false
	}
	if (req.Body != nil && req.Body != http.NoBody) || req.Header.Get("Range") != "" {
		return Aggregate{}, false
	}
	var cfg Aggregate
	switch {
	case in.Multipath == MultipathOff:
		return Aggregate{}, false
	case t.Aggregate != nil:
		cfg = *t.Aggregate
	case in.Multipath == MultipathAggregate && mptcp.Supported() != nil:
	default:
		return Aggregate{}, false
	}
	size := in.SizeToBeReceived
	if size == 0 {
		size = t.knownSize(req.URL)
	}
	return cfg, size == 0 || size >= cfg.withDefaults(1).MinSize
}

// aggregate fetches the first MinChunk bytes, learns the size and the
// validator, and hands the rest to an aggregated body. Anything unexpected
// in the first answer falls back as the two-step download does.
func (t *Transport) aggregate(req *http.Request, cfg Aggregate) (*http.Response, error) {
	in, _ := FromContext(req.Context())
	var paths []*Path
	if !isLoopbackHost(req.URL.Hostname()) {
		m := t.Manager
		if m == nil {
			var err error
			if m, err = DefaultManager(); err != nil {
				return nil, err
			}
		}
		paths, _ = permit(&in, m.Paths(), 0, false)
	}
	cfg = cfg.withDefaults(max(len(paths), 1))
	// The first range is read by the aggregated body alongside the others:
	// its context is the body's, so that closing the body stops it too.
	// Like them it is asked for again where it fails (aggBody.fail), so
	// its connection closes on a path taken for silent rather than being
	// held (see entry.recoverable).
	ctx, stop := context.WithCancel(req.Context())
	ask := firstRange(cfg.MinChunk)
	resp1, err := t.roundTrip(ask.request(callerResumes(WithIntents(ctx, Intents{Category: CategoryQuery, SizeToBeReceived: cfg.MinChunk})), req), nil)
	if err != nil {
		stop()
		return nil, err
	}
	got, kind, _ := ask.check(resp1)
	switch kind {
	case answerWhole, answerOther:
		resp1.Request = req
		resp1.Body = &closeFunc{resp1.Body, stop}
		return resp1, nil
	case answerPart:
	default:
		stop()
		return t.plainAfter(req, resp1)
	}
	t.rememberSize(req.URL, got.total)
	v := validatorOf(resp1.Header)
	if got.last+1 == got.total {
		return wholeOf(resp1, req, got.total, &closeFunc{got.body(resp1.Body), stop}), nil
	}
	if v.value == "" {
		stop()
		return t.plainAfter(req, resp1) // nothing to keep the ranges to one version
	}
	return wholeOf(resp1, req, got.total, newAggBody(ctx, stop, t, req, paths, cfg, v, got, resp1.Body)), nil
}
