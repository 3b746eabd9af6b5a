package intents

import (
	"errors"
	"net/http"
)

// roundTripWith sends req, whose intents are in, on a pooled connection;
// mv, if set, is the move it makes (see moveCheck.moveTo).
func (t *Transport) roundTripWith(req *http.Request, in Intents, mv *moveTicket) (*http.Response, error) {
	var r request // on the stack: what outlives the call is r.dial's originDialer
	err := t.prepare(&r, req, in, mv)
	defer func() {
		if r.moving { // returned before the slot was used
			t.core.undo(grant{slot: r.moveSlot})
		}
	}()
	if err != nil {
		closeBody(req)
		return nil, err
	}
	resp, e, expect, err := r.send()
	if err != nil {
		return nil, err
	}
	return r.wrapBody(resp, e, expect)
}

// prepare finds out, into r, what the steps of req's way need: its
// origin, the size to expect if no intent said, its proxy, and how to dial
// it; mv is the move it makes, if any. On an error r still says whether it
// holds a slot to move onto, to be given back.
func (t *Transport) prepare(r *request, req *http.Request, in Intents, mv *moveTicket) error {
	*r = request{t: t, req: req, in: in}
	if mv != nil {
		r.moved, r.moving = true, mv.holdsSlot()
		if r.moving {
			r.moveSlot = mv.slot
		} else {
			r.in = r.in.requiring(mv.onto)
		}
	}
	r.race, _ = req.Context().Value(raceKey{}).(*raceEntry)
	if req.URL == nil {
		return errors.New("intents: nil Request.URL")
	}
	o, err := t.originOf(req.URL)
	if err != nil {
		return err
	}
	r.o, r.key = o, o.key
	if (req.Method == http.MethodGet || req.Method == "") && t.sizes.max > 0 {
		r.object = objectKey{o.key, req.URL.RequestURI()}
		// A size is predicted for a policy to weigh: without a Manager
		// only intents that constrain paths bring one (DefaultManager's).
		if r.in.SizeToBeReceived == 0 && (t.Manager != nil || r.in.constrainsPaths()) {
			r.in.SizeToBeReceived, r.sizeSource = t.sizes.predict(r.object)
			if r.sizeSource != sizeFromURL {
				r.sizeOrigin = o.key
			}
		}
	}
	// The proxy is chosen for the real request, and connections through
	// different proxies are different connections (net/http's
	// connectMethodKey).
	if t.proxy != nil {
		if r.proxy, err = t.proxy(req); err != nil {
			return err
		}
		if r.proxy != nil {
			r.key += " via " + r.proxy.String()
		}
	}
	r.dest = Destination{Network: "tcp", Host: o.host, Port: o.port, TLS: o.scheme == "https"}
	d := &originDialer{t: t, o: o, proxy: r.proxy, in: r.in}
	r.dial = d.tcp
	if t.HTTP3 != nil {
		r.dial = d.http3OrTCP
	}
	return nil
}

// movable reports whether a response may move (see Mover): a GET without
// a body or a Range header, answered 200 with a length on an HTTP/1
// connection (which it has to itself) or on an HTTP/3 one (whose stream
// alone ends; see moveTo) bound to a path, not through a proxy, not moved
// before, and the Manager's policy a Mover.
func (t *Transport) movable(req *http.Request, resp *http.Response, e *entry, proxied bool) bool {
	return t.Manager.mover() != nil && !e.mptcp && (resp.ProtoMajor == 1 || multiplexed(e)) && resumable(req, resp, e, proxied)
}
