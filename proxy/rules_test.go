package proxy

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
)

func TestParseRules(t *testing.T) {
	rules, err := ParseRules(strings.NewReader(`
# video from the CDN: streamed, never on cellular
*.videocdn.example   category=stream,prefer=wired,prohibit=cellular
updates.example	category=bulk
10.0.0.0/8  require=eth0
*           category=query
`))
	require.NoError(t, err)
	require.Len(t, rules, 4)
	assert.Equal(t, "*.videocdn.example", rules[0].Host)
	assert.Equal(t, intents.CategoryStream, rules[0].Intents.Category)
	assert.Equal(t, intents.LevelProhibit, rules[0].Intents.Types[intents.TypeCellular])
	assert.Equal(t, netip.MustParsePrefix("10.0.0.0/8"), rules[2].Prefix)

	for _, c := range []struct {
		host string
		want intents.Category
	}{
		{"a.videocdn.example", intents.CategoryStream},
		{"A.B.VideoCDN.example.", intents.CategoryStream},
		{"videocdn.example", intents.CategoryQuery}, // *.x is under x, not x
		{"xvideocdn.example", intents.CategoryQuery},
		{"updates.example", intents.CategoryBulk},
		{"a.updates.example", intents.CategoryQuery},
		{"10.1.2.3", intents.CategoryUnspecified}, // the prefix rule, which says no category
		{"[::ffff:10.1.2.3]", intents.CategoryUnspecified},
		{"192.0.2.1", intents.CategoryQuery},
	} {
		in, ok := match(rules, c.host)
		require.True(t, ok, c.host)
		assert.Equal(t, c.want, in.Category, c.host)
	}
	in, _ := match(rules, "::ffff:10.1.2.3")
	assert.Equal(t, intents.LevelRequire, in.Interfaces["eth0"], "a mapped address is the IPv4 one")
	_, ok := match(rules[:3], "example.org")
	assert.False(t, ok)
}

func TestParseRulesErrors(t *testing.T) {
	for _, bad := range []string{
		"example.com category=nonsense", // bad intents
		"10.0.0.0/33 category=bulk",     // bad prefix
		"exa mple.com category=bulk",    // "mple.com category=bulk" are not intents
		"ex/ample category=bulk",
		"*.* category=bulk",
		"a\x00b category=bulk",
		strings.Repeat("a", maxRulesLine+1) + " category=bulk",
	} {
		_, err := ParseRules(strings.NewReader("# ok\n" + bad + "\n"))
		assert.Error(t, err, "%q", bad)
	}
	_, err := ParseRules(strings.NewReader("# ok\n" + strings.Repeat("a", maxRulesLine+1) + "\n"))
	assert.ErrorContains(t, err, "rules line 2: longer than", "a line too long is named")
	_, err = ParseRules(strings.NewReader("exa_mple.com category=bulk\n"))
	assert.NoError(t, err, "underscores are seen in real names")
	rules, err := ParseRules(strings.NewReader("intranet.example\n* category=bulk\n"))
	require.NoError(t, err)
	in, ok := match(rules, "intranet.example")
	assert.True(t, ok)
	assert.Zero(t, in.Category, "a pattern alone: no intents, and the rules after it do not apply")
}

// A rules file's rules read back from their String: the same rules.
func FuzzParseRules(f *testing.F) {
	f.Add("*.videocdn.example category=stream,prefer=wired,prohibit=cellular\n10.0.0.0/8 require=eth0\n")
	f.Add("* recv=10MB\n# c\n\nexample.com\tprohibit=expensive")
	f.Add("::1/128 multipath=handover")
	f.Fuzz(func(t *testing.T, text string) {
		rules, err := ParseRules(strings.NewReader(text))
		if err != nil {
			return
		}
		var b strings.Builder
		for _, r := range rules {
			b.WriteString(r.String() + "\n")
		}
		again, err := ParseRules(strings.NewReader(b.String()))
		require.NoError(t, err, "%q", b.String())
		require.Equal(t, len(rules), len(again))
		for i := range rules {
			assert.Equal(t, rules[i].String(), again[i].String())
		}
	})
}

// The Intents header of a plain-HTTP request: parsed or refused, never a
// panic, and what parses reads back.
func FuzzIntentsHeader(f *testing.F) {
	f.Add("category=bulk,recv=10MB")
	f.Add("prohibit=cellular, require=if:eth%200")
	f.Add("timeliness=interactive,,")
	f.Fuzz(func(t *testing.T, h string) {
		in, err := intents.ParseIntents(h)
		if err != nil {
			return
		}
		again, err := intents.ParseIntents(in.String())
		require.NoError(t, err, "%q", in.String())
		assert.Equal(t, in.String(), again.String())
	})
}
