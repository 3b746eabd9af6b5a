package policy

import "github.com/sockintents/intents"

// System leaves the path to the operating system's routing table: the
// behaviour of a plain net.Dialer. When intents constrain the paths, the
// Dialer binds to the permitted paths in preference order instead, since the
// OS might route onto an excluded one.
type System struct{}

// Decide chooses system routing.
func (System) Decide(_ *intents.Request, d *intents.Decision) {
	d.Choices = append(d.Choices, intents.Choice{})
	d.Reason = "system: operating system routing"
}
