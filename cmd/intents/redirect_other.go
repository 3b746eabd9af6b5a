//go:build !linux

package main

import (
	"errors"
	"net/netip"
	"os/exec"
)

// redirection is Linux's alone (cgroups, nftables).
type redirection struct{}

func redirect(v4, v6 netip.AddrPort) (*redirection, error) {
	return nil, errors.New("-transparent needs Linux (cgroups, nftables)")
}

func (r *redirection) prepare(*exec.Cmd) {}

func (r *redirection) close() error { return nil }
