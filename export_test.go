package intents

import (
	"context"
	"net/http"

	"github.com/sockintents/intents/internal/estimate"
)

// Hooks for the external tests (package intents_test), which need a
// policy of package policy and so cannot be in this package.

// SaveKnowledgeNow saves what m learnt, as its periodic save does.
func SaveKnowledgeNow(m *Manager) { m.saveKnowledge() }

// EstimatorOf is p's live estimator.
func EstimatorOf(p *Path) *estimate.Path { return p.est }

// NextDecision is what t would decide now for a GET of rawURL, as
// RoundTrip decides it (the size it predicts, and the decision with its
// trace), with cands as the destination's pooled connections and queued
// as what waits behind it; and whether the request would be raced (see
// Transport.DisableFirstRace), on which paths. It sends nothing.
type NextDecision struct {
	Info     DecisionInfo
	Race     [2]string
	Settled  bool // the origin's typical size stands on enough responses (see holdsForSizes)
	Decided  error
	Prepared error
}

// DecideNext is NextDecision for t.
func DecideNext(t *Transport, rawURL string, cands []Candidate, queued int64) NextDecision {
	t.init()
	var nd NextDecision
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		nd.Prepared = err
		return nd
	}
	var r request
	if nd.Prepared = t.prepare(&r, req, Intents{}, nil); nd.Prepared != nil {
		return nd
	}
	if a, b, ok := t.racePaths(req, &r.in); ok {
		nd.Race = [2]string{a.Name, b.Name}
	}
	if r.sizeOrigin != "" {
		if typical, source := t.sizes.originSize(r.sizeOrigin); source != "" {
			r.in.SizeToBeReceived, r.sizeSource = typical, source
		}
		nd.Settled = t.sizes.settled(r.sizeOrigin)
	}
	ctx := WithDecisionTrace(context.Background(), func(di DecisionInfo) { nd.Info = di })
	_, nd.Decided = t.Manager.decide(ctx, query{in: &r.in, sizeSource: r.sizeSource, dest: r.dest, loopback: hostNotLoopback,
		cands: cands, queued: queued}, nil)
	return nd
}

// RememberSize has t learn that the object at rawURL is size bytes, as a
// response's Content-Length teaches it.
func RememberSize(t *Transport, req *http.Request, size int64) {
	t.init()
	t.rememberSize(req.URL, size)
}
