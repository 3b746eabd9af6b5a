package policy

import (
	"fmt"

	"github.com/sockintents/intents"
)

// FileSize maps ranges of SizeToBeReceived to paths, the prototype's
// filesize policy: the first rule whose Max is at least the size (Max 0:
// any size) puts its path first; the other paths follow in preference order.
// Unknown sizes count as 0.
type FileSize struct {
	Rules []SizeRule
}

// SizeRule sends sizes up to Max bytes (0: any) to the interface Path.
type SizeRule struct {
	Max  int64
	Path string
}

// Decide puts the path of the matching rule first.
func (f *FileSize) Decide(req *intents.Request, d *intents.Decision) {
	size := req.Intents.SizeToBeReceived
	d.Reason = fmt.Sprintf("filesize: no rule for %d B", size)
	var first *intents.Path
	for _, r := range f.Rules {
		if r.Max != 0 && size > r.Max {
			continue
		}
		for _, p := range req.Paths {
			if p.Name == r.Path {
				first = p
			}
		}
		if first != nil {
			d.Reason = fmt.Sprintf("filesize: %d B ≤ %d B → %s", size, r.Max, first.Name)
			break
		}
	}
	if first != nil {
		d.Choices = append(d.Choices, intents.Choice{Path: first})
	}
	for _, p := range req.Paths {
		if p != first {
			d.Choices = append(d.Choices, intents.Choice{Path: p})
		}
	}
}
