// Package hostsizes links the proxy's memory of what each host's
// tunnels received to the Knowledge of the Manager that places them
// (intents.Config.Knowledge), which package intents keeps: a proxy
// started again expects of a host's next tunnel what the running one
// would have. It is set by package intents, which the proxy imports.
package hostsizes

// Memory remembers how many bytes each host's last tunnels received.
// It is safe for concurrent use.
type Memory interface {
	// Predict is the median of what host's last tunnels received; 0 if
	// none is known.
	Predict(host string) int64
	// Learn records that a tunnel to host received n bytes.
	Learn(host string, n int64)
	// Close ends its saving with the Manager's, keeping what it learnt
	// for the next save.
	Close()
}

// Of returns a Memory of at most maxHosts hosts, each its last perHost
// tunnels, kept with the Knowledge of manager (an *intents.Manager) and
// started from it; false if manager keeps none.
var Of func(manager any, maxHosts, perHost int) (Memory, bool)
