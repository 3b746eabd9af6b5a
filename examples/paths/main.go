// Command paths prints the path table that intents sees on this host (the
// interfaces, their addresses, types, labels and DNS servers) and, for the
// intents given with -intents, which paths are permitted and in what order a
// dial would try them.
//
//	go run ./examples/paths -intents 'category=bulk,prohibit=cellular'
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"text/tabwriter"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/policy"
)

func main() {
	text := flag.String("intents", "", "intents in text form, e.g. category=query,prefer=wifi")
	host := flag.String("host", "example.com", "destination host for the endpoint lookup")
	resolve := flag.Bool("resolve", false, "also resolve -host on each permitted path (sends DNS queries)")
	flag.Parse()

	in, err := intents.ParseIntents(*text)
	if err != nil {
		log.Fatal(err)
	}
	m, err := intents.NewManager(intents.Config{Policy: &policy.ByCategory{}, NoWatch: true})
	if err != nil {
		log.Fatal(err)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PATH\tTYPE\tUP\tEXPENSIVE\tADDRESSES\tDNS\tDNS FROM")
	for _, p := range m.Paths() {
		fmt.Fprintf(w, "%s\t%s\t%v\t%v\t%v\t%v\t%s\n", p.Name, p.Type, p.Up, p.Expensive, p.Addrs, p.DNS, p.DNSSource)
	}
	w.Flush()

	fmt.Printf("\nintents: %q\n", in.String())
	if !*resolve {
		fmt.Println("(add -resolve to resolve", *host, "on each permitted path)")
		return
	}
	ctx := intents.WithIntents(context.Background(), in)
	eps, err := m.Resolver().LookupEndpoints(ctx, "tcp", *host, "443")
	if err != nil {
		fmt.Println("lookup:", err)
		return
	}
	for i, ep := range eps {
		if ep.Path == nil {
			fmt.Printf("%d. %s via the operating system's routing\n", i+1, ep.Remote)
		} else {
			fmt.Printf("%d. %s via %s from %s\n", i+1, ep.Remote, ep.Path.Name, ep.Local)
		}
	}
}
