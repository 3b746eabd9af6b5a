// Command intents shows and uses this host's paths the way the intents
// library sees them: the path table with live estimates, name resolution
// per path, downloads scheduled over the paths by a policy, and a proxy
// that gives the same to every other program.
//
//	intents paths [-json] [-probe HOST:PORT]
//	intents resolve [-json] NAME
//	intents get [-json] [-o FILE] [-intents TEXT] [-policy NAME] [-aggregate] [-twostep BYTES] URL
//	intents proxy [-listen ADDR[=INTENTS]]... [-tls-listen ADDR[=INTENTS]]... [-socks ADDR[=INTENTS]]... [-rules FILE] [-policy NAME] [-v] ...
//	intents run [-intents TEXT] [-policy NAME] [-rules FILE] [-v] ... -- PROGRAM ARGS...
//
// None of it needs privileges. The -json forms print one JSON document on
// stdout, for scripts.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/policy"
)

const usage = `usage:
  intents paths [-json] [-probe HOST:PORT]
  intents resolve [-json] NAME
  intents get [-json] [-o FILE] [-intents TEXT] [-policy NAME] [-aggregate] [-twostep BYTES] URL
  intents proxy [-listen ADDR[=INTENTS]]... [-tls-listen ADDR[=INTENTS]]... [-cert FILE -key FILE]
                [-socks ADDR[=INTENTS]]... [-transparent ADDR[=INTENTS]]... [-rules FILE] [-policy NAME] [-v]
                [-metrics ADDR] [-allow CIDR,...] [-auth USER:PASSWORD] [-ports PORT,...|any] [-allow-local]
                [-tunnel-idle DURATION] [-pac PATTERN=ADDR]...
  intents run [-intents TEXT] [-policy NAME] [-rules FILE] [-allow-local] [-ports PORT,...|any] [-v] -- PROGRAM ARGS...
  intents run -proxy http://HOST:PORT -- PROGRAM ARGS...
`

func main() {
	// Terminated, a command ends as when interrupted: `run -transparent`
	// removes its rules, `proxy` closes its connections.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, intents.NewManager))
}

// managerFunc makes the Manager of a command from what the command sets
// of its configuration (policy, watching, logger): intents.NewManager,
// over every interface. Tests replace it with one over their paths.
type managerFunc func(cfg intents.Config) (*intents.Manager, error)

// run runs one command and returns the exit status: 0, 1 for a failure,
// 2 for a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, mf managerFunc) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "paths":
		err = cmdPaths(ctx, args[1:], stdout, mf)
	case "resolve":
		err = cmdResolve(ctx, args[1:], stdout, mf)
	case "get":
		err = cmdGet(ctx, args[1:], stdout, stderr, mf)
	case "proxy":
		err = cmdProxy(ctx, args[1:], stderr, mf)
	case "run":
		err = cmdRun(ctx, args[1:], stdout, stderr, mf)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		err = usageError{fmt.Sprintf("unknown command %q", args[0])}
	}
	var ue usageError
	var he helpError
	var es exitStatus
	switch {
	case errors.As(err, &es):
		return es.code // the program's own
	case errors.As(err, &he):
		// Asked for: the command's options on stdout, success.
		fmt.Fprintf(stdout, "usage of intents %s:\n", he.fs.Name())
		he.fs.SetOutput(stdout)
		he.fs.PrintDefaults()
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "intents: %s\n%s", ue.msg, usage)
		return 2
	case err != nil:
		// The library's errors carry the prefix already.
		fmt.Fprintf(stderr, "intents: %s\n", strings.TrimPrefix(err.Error(), "intents: "))
		return 1
	}
	return 0
}

// helpError is -h or -help given to a command.
// knowledgeFlag is -knowledge: where a command's Manager keeps what it
// learns of each network's paths (intents.Config.Knowledge), by default
// intents.DefaultKnowledgeFile, so that the next run on the same network
// starts from it.
func knowledgeFlag(fs *flag.FlagSet) *string {
	def, err := intents.DefaultKnowledgeFile()
	if err != nil {
		def = "" // no cache directory (no $HOME): nothing kept
	}
	return fs.String("knowledge", def, "keep what is learnt of each network's paths in `FILE` and start from it next time (empty: keep nothing)")
}

type helpError struct{ fs *flag.FlagSet }

func (e helpError) Error() string { return e.fs.Name() + ": help requested" }

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run reports errors itself
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return helpError{fs}
		}
		return usageError{err.Error()}
	}
	return nil
}

// pathJSON is a path in -json output.
type pathJSON struct {
	Name        string       `json:"name"`
	Index       int          `json:"index"`
	Type        string       `json:"type"`
	Up          bool         `json:"up"`
	Addresses   []string     `json:"addresses"`
	DNS         []string     `json:"dns"`
	DNSSource   string       `json:"dns_source,omitempty"`
	Expensive   bool         `json:"expensive"`
	Constrained bool         `json:"constrained"`
	Estimate    estimateJSON `json:"estimate"`
}

// estimateJSON is a path's estimate; zero fields are unknown.
type estimateJSON struct {
	Measured    bool    `json:"measured"`
	RTTMillis   float64 `json:"rtt_ms,omitempty"`
	MinRTTMs    float64 `json:"min_rtt_ms,omitempty"`
	CapacityBPS int64   `json:"capacity_bps,omitempty"`
	RateBPS     int64   `json:"rate_bps,omitempty"`
	Loss        float64 `json:"loss,omitempty"`
	Active      int     `json:"active,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func toJSON(p *intents.Path) pathJSON {
	e := p.Estimate()
	j := pathJSON{Name: p.Name, Index: p.Index, Type: p.Type.String(), Up: p.Up, DNSSource: p.DNSSource,
		Expensive: p.Expensive, Constrained: p.Constrained, Addresses: []string{}, DNS: []string{},
		Estimate: estimateJSON{Measured: e.Measured, RTTMillis: ms(e.RTT), MinRTTMs: ms(e.MinRTT),
			CapacityBPS: e.Bandwidth, RateBPS: e.Rate, Loss: e.Loss, Active: e.Active}}
	for _, a := range p.Addrs {
		j.Addresses = append(j.Addresses, a.String())
	}
	for _, s := range p.DNS {
		j.DNS = append(j.DNS, s.String())
	}
	return j
}

func cmdPaths(ctx context.Context, args []string, stdout io.Writer, mf managerFunc) error {
	fs := newFlags("paths")
	asJSON := fs.Bool("json", false, "print JSON")
	probe := fs.String("probe", "", "connect to HOST:PORT once through every path first, to measure its RTT")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{"paths takes no arguments"}
	}
	m, err := mf(intents.Config{NoWatch: true})
	if err != nil {
		return err
	}
	defer m.Close()
	if *probe != "" {
		probePaths(ctx, m, *probe)
	}
	return printPaths(stdout, m.Paths(), *asJSON)
}

// probePaths connects to target once through each up path: the connect
// time is an RTT sample. A path that cannot reach it stays unmeasured.
func probePaths(ctx context.Context, m *intents.Manager, target string) {
	d := &intents.Dialer{Manager: m, Timeout: 5 * time.Second}
	for _, p := range m.Paths() {
		if !p.Up {
			continue
		}
		pctx := intents.WithIntents(ctx, intents.Intents{Multipath: intents.MultipathOff,
			Interfaces: map[string]intents.Level{p.Name: intents.LevelRequire}})
		if c, err := d.DialContext(pctx, "tcp", target); err == nil {
			c.Close()
		}
	}
}

// printPaths writes the path table, or its JSON.
func printPaths(w io.Writer, paths []*intents.Path, asJSON bool) error {
	if asJSON {
		out := make([]pathJSON, 0, len(paths))
		for _, p := range paths {
			out = append(out, toJSON(p))
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tTYPE\tUP\tCOST\tADDRESSES\tDNS\tRTT\tCAPACITY")
	for _, p := range paths {
		j := toJSON(p)
		var cost []string
		if p.Expensive {
			cost = append(cost, "expensive")
		}
		if p.Constrained {
			cost = append(cost, "constrained")
		}
		rtt, capacity := "-", "-"
		if j.Estimate.RTTMillis > 0 {
			rtt = fmt.Sprintf("%.1f ms", j.Estimate.RTTMillis)
			if !j.Estimate.Measured {
				rtt += " (prior)"
			}
		}
		if j.Estimate.CapacityBPS > 0 {
			capacity = fmt.Sprintf("%.1f Mbit/s", float64(j.Estimate.CapacityBPS)/1e6)
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%s\t%s\t%s\t%s\n", p.Name, j.Type, p.Up, orDash(strings.Join(cost, ",")),
			orDash(strings.Join(j.Addresses, " ")), orDash(strings.Join(j.DNS, " ")), rtt, capacity)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// answerJSON is one path's answer in resolve -json output.
type answerJSON struct {
	Path      string   `json:"path"`
	Addresses []string `json:"addresses"`
	Error     string   `json:"error,omitempty"`
}

func cmdResolve(ctx context.Context, args []string, stdout io.Writer, mf managerFunc) error {
	fs := newFlags("resolve")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{"resolve takes one NAME"}
	}
	name := fs.Arg(0)
	m, err := mf(intents.Config{NoWatch: true})
	if err != nil {
		return err
	}
	defer m.Close()
	var answers []answerJSON
	for _, p := range m.Paths() {
		if !p.Up || len(p.DNS) == 0 {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		addrs, err := m.Resolver().LookupPath(qctx, p, "ip", name)
		cancel()
		a := answerJSON{Path: p.Name, Addresses: []string{}}
		for _, ip := range addrs {
			a.Addresses = append(a.Addresses, ip.String())
		}
		if err != nil {
			a.Error = err.Error()
		}
		answers = append(answers, a)
	}
	if len(answers) == 0 {
		return errors.New("no up path has a DNS server")
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(answers); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PATH\tANSWER")
		for _, a := range answers {
			text := strings.Join(a.Addresses, " ")
			if a.Error != "" {
				text = "error: " + a.Error
			}
			fmt.Fprintf(tw, "%s\t%s\n", a.Path, orDash(text))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, a := range answers {
		if a.Error == "" {
			return nil
		}
	}
	return errors.New("no path could resolve " + name)
}

// policies are the policies get offers, by name.
var policies = map[string]func() intents.Policy{
	"system":     func() intents.Policy { return nil },
	"eaf":        func() intents.Policy { return &policy.EAF{} },
	"eaf-mptcp":  func() intents.Policy { return &policy.EAFMPTCP{} },
	"rr":         func() intents.Policy { return &policy.RoundRobin{} },
	"bycategory": func() intents.Policy { return &policy.ByCategory{} },
	"balance":    func() intents.Policy { return &policy.LoadBalance{} },
}

func policyNames() string {
	names := make([]string, 0, len(policies))
	for n := range policies {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// orOS names a path of a Transport's statistics: "" is the operating
// system's routing, named as a nil *Path names itself.
func orOS(name string) string {
	if name == "" {
		return (*intents.Path)(nil).String()
	}
	return name
}
