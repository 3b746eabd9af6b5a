package intents

import "time"

// keepSaving saves the paths' knowledge every knowledgeSaveEvery, and a
// last time when Close stops it.
func (m *Manager) keepSaving() {
	defer close(m.saved)
	tick := time.NewTicker(knowledgeSaveEvery)
	defer tick.Stop()
	for {
		select {
		case <-m.saving:
			m.saveKnowledge()
			return
		case <-tick.C:
			m.saveKnowledge()
		}
	}
}

// saveKnowledge saves what this Manager measured of each path, saying on
// the logger if it cannot.
func (m *Manager) saveKnowledge() {
	var ls []learnt
	for _, p := range m.Paths() {
		if p.est == nil {
			continue
		}
		if r, ok := p.est.Learnt(); ok {
			ls = append(ls, learnt{networkID(p), r})
		}
	}
	if len(ls) == 0 {
		return
	}
	if err := m.knowledge.save(ls); err != nil {
		m.knowledge.logger.Warn("intents: saving what was learnt of the paths", "file", m.knowledge.file, "err", err)
	}
}
