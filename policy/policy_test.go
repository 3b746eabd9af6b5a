package policy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sockintents/intents"
)

func paths() []*intents.Path {
	return []*intents.Path{
		{Name: "eth0", Type: intents.TypeWired, Up: true},
		{Name: "wlan0", Type: intents.TypeWifi, Up: true, Prior: intents.Estimate{RTT: 20 * time.Millisecond, Bandwidth: 5e6}},
		{Name: "wwan0", Type: intents.TypeCellular, Up: true, Prior: intents.Estimate{RTT: 60 * time.Millisecond, Bandwidth: 50e6}},
	}
}

func decide(p intents.Policy, cat intents.Category) ([]string, string) {
	req := &intents.Request{Intents: intents.Intents{Category: cat}, Paths: paths()}
	var d intents.Decision
	p.Decide(req, &d)
	var out []string
	for _, c := range d.Choices {
		if c.Path == nil {
			out = append(out, "system")
		} else {
			out = append(out, c.Path.Name)
		}
	}
	return out, d.Reason
}

func TestSystem(t *testing.T) {
	got, reason := decide(System{}, intents.CategoryBulk)
	assert.Equal(t, []string{"system"}, got)
	assert.Contains(t, reason, "system")
}

func TestSingle(t *testing.T) {
	got, _ := decide(Single("wlan0"), 0)
	assert.Equal(t, []string{"wlan0"}, got)
	got, reason := decide(Single("eth9"), 0)
	assert.Empty(t, got)
	assert.Equal(t, "single: eth9 is not permitted", reason)
}

func TestRoundRobin(t *testing.T) {
	var rr RoundRobin
	var firsts []string
	for range 4 {
		got, _ := decide(&rr, 0)
		assert.Len(t, got, 3, "every path is a fallback")
		firsts = append(firsts, got[0])
	}
	assert.Equal(t, []string{"eth0", "wlan0", "wwan0", "eth0"}, firsts)
}

func TestByCategory(t *testing.T) {
	var b ByCategory
	got, _ := decide(&b, intents.CategoryQuery)
	assert.Equal(t, []string{"wlan0", "wwan0", "eth0"}, got, "lowest RTT first, unknown last")
	got, _ = decide(&b, intents.CategoryBulk)
	assert.Equal(t, []string{"wwan0", "wlan0", "eth0"}, got, "highest bandwidth first")
	got, _ = decide(&b, intents.CategoryUnspecified)
	assert.Equal(t, []string{"eth0", "wlan0", "wwan0"}, got, "preference order kept")

	b.Paths = map[intents.Category]string{intents.CategoryBulk: "eth0", intents.CategoryQuery: "gone0"}
	got, reason := decide(&b, intents.CategoryBulk)
	assert.Equal(t, []string{"eth0", "wwan0", "wlan0"}, got)
	assert.Contains(t, reason, "configured")
	got, _ = decide(&b, intents.CategoryQuery)
	assert.Equal(t, []string{"wlan0", "wwan0", "eth0"}, got, "a configured path that is not permitted is ignored")
}
