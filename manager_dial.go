package intents

import (
	"context"
	"fmt"
	"net"
	"net/http/httptrace"
	"net/netip"
	"slices"
	"strconv"
)

// pathAddrs resolves host on path p (traced as net/http's dials are): its
// addresses the path can reach, of a family it has an address of and that
// network allows. viaLoopback says that host is this host (a path other
// than loopback got only loopback addresses): the operating system reaches
// it, over loopback, at addrs[0].
func (m *Manager) pathAddrs(ctx context.Context, network, host string, p *Path) (addrs []netip.Addr, viaLoopback bool, err error) {
	trace := httptrace.ContextClientTrace(ctx)
	_, notLiteral := netip.ParseAddr(host) // a name: resolved, so traced
	if trace != nil && trace.DNSStart != nil && notLiteral != nil {
		trace.DNSStart(httptrace.DNSStartInfo{Host: host})
	}
	addrs, err = m.Resolver().lookupChoice(ctx, network, host, p)
	if trace != nil && trace.DNSDone != nil && notLiteral != nil {
		info := httptrace.DNSDoneInfo{Err: err}
		for _, a := range addrs {
			info.Addrs = append(info.Addrs, net.IPAddr{IP: a.AsSlice(), Zone: a.Zone()})
		}
		trace.DNSDone(info)
	}
	if err != nil {
		return nil, false, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	if p.Type != TypeLoopback && len(addrs) > 0 && !slices.ContainsFunc(addrs, func(a netip.Addr) bool { return !a.IsLoopback() }) {
		return addrs, true, nil
	}
	addrs = slices.DeleteFunc(addrs, func(a netip.Addr) bool {
		_, ok := p.Addr(a)
		return !ok || (networkFamily(network) == 4 && !a.Is4()) || (networkFamily(network) == 6 && a.Is4())
	})
	if len(addrs) == 0 {
		return nil, false, &net.OpError{Op: "dial", Net: network,
			Err: fmt.Errorf("intents: %s has no address on path %s's families (%s)", host, p.Name, familiesOf(p))}
	}
	return addrs, false, nil
}

// plan decides the paths for a dial: a decision without pooled
// connections, of which only the new-connection choices count.
func (m *Manager) plan(ctx context.Context, network, host string, port uint16, tls bool) (plan, error) {
	in, _ := FromContext(ctx)
	dest := Destination{Network: network, Host: host, Port: port, TLS: tls}
	d, err := m.decide(ctx, query{in: &in, dest: dest}, nil)
	if err != nil {
		return plan{}, err
	}
	pl := plan{intent: d.intent}
	for _, c := range d.choices {
		if !c.Wait && c.Reuse == nil {
			pl.choices = appendPath(pl.choices, c)
		}
	}
	if len(pl.choices) == 0 {
		return pl, d.noPath(dest, "policy chose no permitted path: "+d.reason)
	}
	return pl, nil
}

// osAddress is what to dial for host when the operating system routes:
// address, or for a name the Manager's hosts file maps to loopback, that
// address (the Manager's hosts file may not be the system's).
func (m *Manager) osAddress(host string, port uint16, address string) string {
	if a, ok := m.loopbackAddr(host); ok {
		return net.JoinHostPort(a.String(), strconv.Itoa(int(port)))
	}
	return address
}
