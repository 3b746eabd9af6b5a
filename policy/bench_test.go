package policy

import (
	"testing"

	"github.com/sockintents/intents"
)

// BenchmarkDecide is one decision of each built-in policy over 2 paths.
func BenchmarkDecide(b *testing.B) {
	for _, bc := range []struct {
		name string
		p    intents.Policy
	}{
		{"system", System{}},
		{"single", Single("wlan0")},
		{"roundrobin", &RoundRobin{}},
		{"bycategory", &ByCategory{}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			req := &intents.Request{Intents: intents.Intents{Category: intents.CategoryQuery}, Paths: paths()[:2]}
			d := intents.Decision{Choices: make([]intents.Choice, 0, 4)}
			b.ReportAllocs()
			for b.Loop() {
				d.Choices = d.Choices[:0]
				bc.p.Decide(req, &d)
			}
		})
	}
}
