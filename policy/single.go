package policy

import "github.com/sockintents/intents"

// Single uses only the interface with the given name; when that path is
// not permitted (down, or excluded by intents) it chooses nothing and the
// dial fails with an *intents.NoPathError.
type Single string

// Decide chooses the named path if it is permitted.
func (s Single) Decide(req *intents.Request, d *intents.Decision) {
	for _, p := range req.Paths {
		if p.Name == string(s) {
			d.Choices = append(d.Choices, intents.Choice{Path: p})
			d.Reason = "single: " + p.Name
			return
		}
	}
	d.Reason = "single: " + string(s) + " is not permitted"
}
