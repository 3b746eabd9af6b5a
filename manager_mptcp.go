package intents

// MPTCPError says why the last attempt to configure MPTCP endpoints (see
// Config.MPTCPEndpoints) failed, or nil.
func (m *Manager) MPTCPError() error {
	ep := &m.mptcp
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.err
}

// useMPTCP counts an MPTCP connection about to be dialed with its first
// subflow on first, setting the endpoints' backup flags before the dial so
// the subflows join with the right priority. Call release when it closes
// (or the dial failed).
func (m *Manager) useMPTCP(first *Path, mp Multipath) (release func()) {
	if m == nil || !m.cfg.MPTCPEndpoints || (mp != MultipathHandover && mp != MultipathAggregate) {
		return func() {}
	}
	m.mptcp.count(first, mp, 1)
	return func() { m.mptcp.count(first, mp, -1) }
}
