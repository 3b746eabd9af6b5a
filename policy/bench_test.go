package policy

import (
	"fmt"
	"testing"
	"time"

	"github.com/sockintents/intents"
)

// BenchmarkDecide is one decision of each built-in policy with 2, 4 and 16
// paths and 0, 6 and 100 pooled candidates.
func BenchmarkDecide(b *testing.B) {
	policies := []struct {
		name string
		p    intents.Policy
	}{
		{"system", System{}}, {"single", Single("p1")}, {"roundrobin", &RoundRobin{}},
		{"bycategory", &ByCategory{}}, {"eaf", &EAF{}}, {"eafmptcp", &EAFMPTCP{}},
		{"threshold", &Threshold{}}, {"hash", Hash{}}, {"loadbalance", LoadBalance{}}, {"predictive", &Predictive{}},
	}
	for _, np := range []int{2, 4, 16} {
		for _, nc := range []int{0, 6, 100} {
			req := benchRequest(np, nc)
			for _, pc := range policies {
				b.Run(fmt.Sprintf("%s/paths=%d/cands=%d", pc.name, np, nc), func(b *testing.B) {
					d := intents.Decision{Choices: make([]intents.Choice, 0, np+nc+1)}
					b.ReportAllocs()
					for b.Loop() {
						d.Choices = d.Choices[:0]
						pc.p.Decide(req, &d)
					}
				})
			}
		}
	}
}

func benchRequest(np, nc int) *intents.Request {
	req := &intents.Request{Intents: intents.Intents{Category: intents.CategoryBulk, SizeToBeReceived: 400 << 10},
		Dest: intents.Destination{Host: "www.example", Port: 443, TLS: true}}
	for i := range np {
		req.Paths = append(req.Paths, &intents.Path{Name: fmt.Sprintf("p%d", i+1), Up: true,
			Prior: intents.Estimate{RTT: time.Duration(10+7*i) * time.Millisecond, Bandwidth: int64(5+3*i) * 1e6}})
	}
	for i := range nc {
		req.Candidates = append(req.Candidates, intents.Candidate{ID: uint64(i), Path: req.Paths[i%np],
			Available: i % 2, InFlight: 1 - i%2, Pending: int64(i) * 1000, Idle: time.Duration(i) * time.Millisecond})
	}
	return req
}
