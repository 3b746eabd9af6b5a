package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/sockintents/intents"
)

// A Rule gives intents to the destinations it matches: traffic that
// cannot say what it is (a browser's, a package manager's) gets them by
// where it goes.
type Rule struct {
	// Host matches a destination given by name: "example.com" that host
	// only, "*.example.com" every host under it (not example.com itself),
	// "*" every destination. Names compare case-insensitively, without a
	// trailing dot.
	Host string
	// Prefix, if valid, matches a destination given as an address within
	// it, instead of Host. A name is not resolved to match it: each path
	// resolves names itself, and may get other addresses.
	Prefix netip.Prefix
	// Intents are merged over the listener's: a rule may add a
	// prohibition, never lift one (see intents.Intents.Merge).
	Intents intents.Intents
}

// Match reports whether r applies to host, a destination's name or
// address.
func (r Rule) Match(host string) bool {
	if r.Prefix.IsValid() {
		a, err := netip.ParseAddr(strings.Trim(host, "[]"))
		return err == nil && r.Prefix.Contains(a.Unmap())
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	switch pat := strings.ToLower(r.Host); {
	case pat == "*":
		return true
	case strings.HasPrefix(pat, "*."):
		return strings.HasSuffix(host, pat[1:]) && len(host) > len(pat)-1
	default:
		return host == pat
	}
}

// String is r as a line of a rules file.
func (r Rule) String() string {
	pat := r.Host
	if r.Prefix.IsValid() {
		pat = r.Prefix.String()
	}
	return strings.TrimSpace(pat + " " + r.Intents.String())
}

// match returns the intents of the first rule that matches host.
func match(rules []Rule, host string) (intents.Intents, bool) {
	for _, r := range rules {
		if r.Match(host) {
			return r.Intents, true
		}
	}
	return intents.Intents{}, false
}

// maxRulesLine bounds a line of a rules file.
const maxRulesLine = 4096

// ParseRules reads rules, one a line: a pattern (a host, "*.domain", "*"
// or an address prefix such as 10.0.0.0/8) and, after white space, the
// intents in intents.ParseIntents's syntax; a pattern alone gives its
// destinations no intents, and keeps the rules after it from applying.
// Blank lines and lines that start with # are skipped. For example:
//
//	# video from the CDN on the wired path, never on cellular
//	*.videocdn.example  category=stream,prefer=wired,prohibit=cellular
//	10.0.0.0/8          require=eth0
func ParseRules(r io.Reader) ([]Rule, error) {
	var rules []Rule
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 256), maxRulesLine)
	n := 1
	for ; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		rule, err := parseRule(line)
		if err != nil {
			return nil, fmt.Errorf("proxy: rules line %d: %w", n, err)
		}
		rules = append(rules, rule)
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, fmt.Errorf("proxy: rules line %d: longer than %d bytes", n, maxRulesLine)
	} else if err != nil {
		return nil, fmt.Errorf("proxy: rules: %w", err)
	}
	return rules, nil
}

func parseRule(line string) (Rule, error) {
	pat, rest := line, ""
	if i := strings.IndexAny(line, " \t"); i >= 0 {
		pat, rest = line[:i], strings.TrimSpace(line[i:])
	}
	in, err := intents.ParseIntents(rest)
	if err != nil {
		return Rule{}, err
	}
	rule := Rule{Intents: in}
	if strings.Contains(pat, "/") {
		p, err := netip.ParsePrefix(pat)
		if err != nil {
			return Rule{}, err
		}
		rule.Prefix = p.Masked()
		return rule, nil
	}
	if err := checkHostPattern(pat); err != nil {
		return Rule{}, err
	}
	rule.Host = pat
	return rule, nil
}

// checkHostPattern accepts "*", "*.name" and names: letters, digits,
// hyphens, dots, and underscores (seen in real names).
func checkHostPattern(pat string) error {
	name := strings.TrimPrefix(pat, "*.")
	if pat == "*" {
		return nil
	}
	if name == "" || len(name) > 253 {
		return fmt.Errorf("%q is no host pattern", pat)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == ':') {
			return fmt.Errorf("%q is no host pattern", pat)
		}
	}
	return nil
}
