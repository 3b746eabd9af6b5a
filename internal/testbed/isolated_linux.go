package testbed

import "net/netip"

// Isolated is a namespace whose only way out is a veth to the client
// namespace, on a /30 of its own with no route beyond: a program run in
// it (a browser) reaches nothing but what listens on Gateway in the
// client namespace (a proxy), so one that went around its proxy fails
// instead of taking one of the paths.
type Isolated struct {
	*Netns
	// Addr is the isolated side's address, Gateway the client side's.
	Addr, Gateway netip.Addr
}

// AddIsolated makes an Isolated namespace beside the client's, deleted
// when the testbed closes.
func (tb *Testbed) AddIsolated() (*Isolated, error) {
	n, err := CreateNetns("iso")
	if err != nil {
		return nil, err
	}
	iso := &Isolated{Netns: n, Addr: netip.MustParseAddr("10.72.0.2"), Gateway: netip.MustParseAddr("10.72.0.1")}
	if err := iso.setup(tb.Client); err != nil {
		n.Close()
		return nil, err
	}
	tb.OnClose(n.Close)
	return iso, nil
}

func (iso *Isolated) setup(client *Netns) error {
	// No IPv6: its link-local address would appear a second or two after
	// the link comes up, and a browser started before then takes that
	// for a network change and fails its requests in flight
	// (net::ERR_NETWORK_CHANGED).
	for _, key := range []string{"net/ipv6/conf/all/disable_ipv6", "net/ipv6/conf/default/disable_ipv6"} {
		if err := iso.Sysctl(key, "1"); err != nil {
			return err
		}
	}
	if err := run("ip", "link", "add", "isoc", "netns", client.Name, "type", "veth", "peer", "name", "iso", "netns", iso.Name); err != nil {
		return err
	}
	for _, side := range []struct {
		n    *Netns
		dev  string
		addr netip.Addr
	}{{client, "isoc", iso.Gateway}, {iso.Netns, "iso", iso.Addr}} {
		if err := side.n.IP("addr", "add", side.addr.String()+"/30", "dev", side.dev); err != nil {
			return err
		}
		if err := side.n.IP("link", "set", side.dev, "up"); err != nil {
			return err
		}
	}
	return nil
}
