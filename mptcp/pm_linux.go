package mptcp

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The generic netlink family "mptcp_pm" (linux/mptcp_pm.h).
const (
	familyName = "mptcp_pm"

	cmdAddAddr   = 1
	cmdDelAddr   = 2
	cmdGetAddr   = 3
	cmdSetLimits = 5
	cmdGetLimits = 6
	cmdSetFlags  = 7

	attrAddr        = 1
	attrRcvAddAddrs = 2
	attrSubflows    = 3
	addrAttrFamily  = 1
	addrAttrID      = 2
	addrAttrAddr4   = 3
	addrAttrAddr6   = 4
	addrAttrPort    = 5
	addrAttrFlags   = 6
	addrAttrIfIdx   = 7
	familyVersion   = 1
)

// PM talks to the kernel's in-kernel path manager. Changing it needs
// CAP_NET_ADMIN; reading does not. It works in the network namespace of the
// thread that opened it. Close it when done.
type PM struct {
	c      *genetlink.Conn
	family genetlink.Family
}

// OpenPM opens the path manager of this network namespace.
func OpenPM() (*PM, error) {
	if err := Supported(); err != nil {
		return nil, err
	}
	c, err := genetlink.Dial(nil)
	if err != nil {
		return nil, fmt.Errorf("mptcp: generic netlink: %w", err)
	}
	f, err := c.GetFamily(familyName)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("mptcp: netlink family %s: %w", familyName, err)
	}
	return &PM{c: c, family: f}, nil
}

// Close closes the netlink socket.
func (p *PM) Close() error { return p.c.Close() }

func (p *PM) do(cmd uint8, attrs []byte, flags netlink.HeaderFlags) ([]genetlink.Message, error) {
	msgs, err := p.c.Execute(genetlink.Message{
		Header: genetlink.Header{Command: cmd, Version: familyVersion},
		Data:   attrs,
	}, p.family.ID, netlink.Request|flags)
	if err != nil {
		var oe *netlink.OpError
		if errors.As(err, &oe) && errors.Is(oe.Err, unix.EPERM) {
			return nil, fmt.Errorf("mptcp: changing the path manager needs CAP_NET_ADMIN: %w", os.ErrPermission)
		}
		return nil, fmt.Errorf("mptcp: path manager: %w", err)
	}
	return msgs, nil
}

// Endpoints lists the configured endpoints.
func (p *PM) Endpoints() ([]Endpoint, error) {
	msgs, err := p.do(cmdGetAddr, nil, netlink.Dump)
	if err != nil {
		return nil, err
	}
	var out []Endpoint
	for _, m := range msgs {
		e, err := decodeEndpointMessage(m.Data)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// AddEndpoint adds an endpoint.
func (p *PM) AddEndpoint(e Endpoint) error {
	b, err := encodeEndpointMessage(e)
	if err != nil {
		return err
	}
	_, err = p.do(cmdAddAddr, b, netlink.Acknowledge)
	return err
}

// DeleteEndpoint deletes the endpoint with the given ID.
func (p *PM) DeleteEndpoint(id uint8) error {
	b, err := encodeEndpointMessage(Endpoint{ID: id})
	if err != nil {
		return err
	}
	_, err = p.do(cmdDelAddr, b, netlink.Acknowledge)
	return err
}

// SetFlags changes the backup and fullmesh flags of the endpoint with e's
// address (or, without one, e's ID) to e.Flags; the kernel ignores the
// other flags. A change of backup is sent to the peer (MP_PRIO) on every
// open subflow from that address, so it applies to existing connections
// as well as new ones.
func (p *PM) SetFlags(e Endpoint) error {
	b, err := encodeEndpointMessage(e)
	if err != nil {
		return err
	}
	_, err = p.do(cmdSetFlags, b, netlink.Acknowledge)
	return err
}

// Limits returns the path manager's limits.
func (p *PM) Limits() (Limits, error) {
	msgs, err := p.do(cmdGetLimits, nil, 0)
	if err != nil {
		return Limits{}, err
	}
	if len(msgs) != 1 {
		return Limits{}, fmt.Errorf("mptcp: %d answers to get limits", len(msgs))
	}
	return decodeLimits(msgs[0].Data)
}

// SetLimits sets the path manager's limits (the kernel caps them at 8).
func (p *PM) SetLimits(l Limits) error {
	b, err := encodeLimits(l)
	if err != nil {
		return err
	}
	_, err = p.do(cmdSetLimits, b, netlink.Acknowledge)
	return err
}

// encodeEndpointMessage encodes MPTCP_PM_ATTR_ADDR with e's fields; zero
// fields are left out (an ID alone names an endpoint to delete).
func encodeEndpointMessage(e Endpoint) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Nested(attrAddr, func(nae *netlink.AttributeEncoder) error {
		if e.Addr.IsValid() {
			a := e.Addr.Unmap()
			if a.Is4() {
				nae.Uint16(addrAttrFamily, unix.AF_INET)
				b := a.As4()
				nae.Bytes(addrAttrAddr4, b[:])
			} else {
				nae.Uint16(addrAttrFamily, unix.AF_INET6)
				b := a.As16()
				nae.Bytes(addrAttrAddr6, b[:])
			}
		}
		if e.ID != 0 {
			nae.Uint8(addrAttrID, e.ID)
		}
		if e.Port != 0 {
			nae.Uint16(addrAttrPort, e.Port)
		}
		if e.Flags != 0 {
			nae.Uint32(addrAttrFlags, uint32(e.Flags))
		}
		if e.IfIndex != 0 {
			nae.Int32(addrAttrIfIdx, int32(e.IfIndex))
		}
		return nil
	})
	return ae.Encode()
}

// decodeEndpointMessage decodes one answer to MPTCP_PM_CMD_GET_ADDR.
func decodeEndpointMessage(b []byte) (Endpoint, error) {
	var e Endpoint
	found := false
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return e, fmt.Errorf("mptcp: endpoint message: %w", err)
	}
	for ad.Next() {
		if ad.Type() != attrAddr {
			continue
		}
		found = true
		ad.Nested(func(nad *netlink.AttributeDecoder) error {
			for nad.Next() {
				switch nad.Type() {
				case addrAttrID:
					e.ID = nad.Uint8()
				case addrAttrAddr4:
					b := nad.Bytes()
					if len(b) != 4 {
						return fmt.Errorf("mptcp: IPv4 address of %d bytes", len(b))
					}
					e.Addr = netip.AddrFrom4([4]byte(b))
				case addrAttrAddr6:
					b := nad.Bytes()
					if len(b) != 16 {
						return fmt.Errorf("mptcp: IPv6 address of %d bytes", len(b))
					}
					e.Addr = netip.AddrFrom16([16]byte(b))
				case addrAttrPort:
					e.Port = nad.Uint16()
				case addrAttrFlags:
					e.Flags = Flags(nad.Uint32())
				case addrAttrIfIdx:
					e.IfIndex = int(nad.Int32())
				}
			}
			return nil
		})
	}
	if err := ad.Err(); err != nil {
		return Endpoint{}, fmt.Errorf("mptcp: endpoint message: %w", err)
	}
	if !found {
		return Endpoint{}, errors.New("mptcp: endpoint message without an address")
	}
	return e, nil
}

func encodeLimits(l Limits) ([]byte, error) {
	ae := netlink.NewAttributeEncoder()
	ae.Uint32(attrRcvAddAddrs, l.AddAddrAccepted)
	ae.Uint32(attrSubflows, l.Subflows)
	return ae.Encode()
}

func decodeLimits(b []byte) (Limits, error) {
	var l Limits
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return l, fmt.Errorf("mptcp: limits message: %w", err)
	}
	for ad.Next() {
		switch ad.Type() {
		case attrRcvAddAddrs:
			l.AddAddrAccepted = ad.Uint32()
		case attrSubflows:
			l.Subflows = ad.Uint32()
		}
	}
	if err := ad.Err(); err != nil {
		return Limits{}, fmt.Errorf("mptcp: limits message: %w", err)
	}
	return l, nil
}

// EnsureEndpoints makes each given address an endpoint with flags (on
// interface ifindex), updating none that exist with other flags: it adds
// what is missing and returns the endpoints it added, so a caller can
// remove them again. At least two subflows per connection are allowed
// (limits raised if lower).
func (p *PM) EnsureEndpoints(addrs map[netip.Addr]int, flags Flags) ([]Endpoint, error) {
	have, err := p.Endpoints()
	if err != nil {
		return nil, err
	}
	var added []Endpoint
	for a, ifindex := range addrs {
		exists := false
		for _, e := range have {
			if e.Addr == a {
				exists = true
			}
		}
		if exists {
			continue
		}
		e := Endpoint{Addr: a, Flags: flags, IfIndex: ifindex}
		if err := p.AddEndpoint(e); err != nil {
			return added, err
		}
		added = append(added, e)
	}
	l, err := p.Limits()
	if err != nil {
		return added, err
	}
	want := Limits{Subflows: max(l.Subflows, uint32(len(addrs))), AddAddrAccepted: max(l.AddAddrAccepted, uint32(len(addrs)))}
	if want != l {
		if err := p.SetLimits(want); err != nil {
			return added, err
		}
	}
	// The kernel picked the IDs: report them.
	if have, err = p.Endpoints(); err == nil {
		for i := range added {
			for _, e := range have {
				if e.Addr == added[i].Addr {
					added[i].ID = e.ID
				}
			}
		}
	}
	return added, nil
}
