package policy

import (
	"cmp"
	"slices"

	"github.com/sockintents/intents"
)

// ByCategory picks a path by the Category intent, as the Socket Intents
// prototype's first policy did: queries, control and keep-alive traffic go
// to the path with the lowest RTT estimate, bulk and streams to the path
// with the highest bandwidth estimate. Paths without an estimate come after
// those with one. Unspecified categories keep the preference order.
//
// Paths overrides the rule per category with an interface name; when that
// path is not permitted the rule applies.
type ByCategory struct {
	Paths map[intents.Category]string
}

// Decide orders the permitted paths for the request's category.
func (b *ByCategory) Decide(req *intents.Request, d *intents.Decision) {
	cat := req.Intents.Category
	paths := slices.Clone(req.Paths)
	reason := "bycategory: " + cat.String() + " keeps preference order"
	switch cat {
	case intents.CategoryQuery, intents.CategoryControl, intents.CategoryKeepalive:
		slices.SortStableFunc(paths, func(a, b *intents.Path) int {
			return cmpKnown(a.Estimate().RTT, b.Estimate().RTT, false)
		})
		reason = "bycategory: " + cat.String() + " → lowest RTT"
	case intents.CategoryBulk, intents.CategoryStream:
		slices.SortStableFunc(paths, func(a, b *intents.Path) int {
			return cmpKnown(a.Estimate().Bandwidth, b.Estimate().Bandwidth, true)
		})
		reason = "bycategory: " + cat.String() + " → highest bandwidth"
	}
	if name, ok := b.Paths[cat]; ok {
		if i := slices.IndexFunc(paths, func(p *intents.Path) bool { return p.Name == name }); i >= 0 {
			p := paths[i]
			paths = append(append([]*intents.Path{p}, paths[:i]...), paths[i+1:]...)
			reason = "bycategory: " + cat.String() + " → " + name + " (configured)"
		}
	}
	for _, p := range paths {
		d.Choices = append(d.Choices, intents.Choice{Path: p})
	}
	d.Reason = reason
}

// cmpKnown orders known (non-zero) values before unknown ones, ascending or,
// with desc, descending.
func cmpKnown[T ~int64](a, b T, desc bool) int {
	switch {
	case a == 0 && b == 0:
		return 0
	case a == 0:
		return 1
	case b == 0:
		return -1
	case desc:
		return cmp.Compare(b, a)
	}
	return cmp.Compare(a, b)
}
