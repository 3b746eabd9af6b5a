//go:build !linux

package mptcp

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
)

var errNotLinux = fmt.Errorf("mptcp: Multipath TCP is Linux only here: %w", errors.ErrUnsupported)

// Supported says MPTCP is unavailable outside Linux.
func Supported() error { return errNotLinux }

// ErrFallback is returned for a connection that asked for MPTCP and got
// plain TCP.
var ErrFallback = errors.New("mptcp: the connection fell back to TCP")

// Is reports false outside Linux.
func Is(syscall.Conn) (bool, error) { return false, errNotLinux }

// ConnInfo is unavailable outside Linux.
func ConnInfo(syscall.Conn) (Info, error) { return Info{}, errNotLinux }

// PM is the path manager; unavailable outside Linux.
type PM struct{}

// OpenPM fails outside Linux.
func OpenPM() (*PM, error) { return nil, errNotLinux }

// Close does nothing.
func (p *PM) Close() error { return nil }

// Endpoints fails outside Linux.
func (p *PM) Endpoints() ([]Endpoint, error) { return nil, errNotLinux }

// AddEndpoint fails outside Linux.
func (p *PM) AddEndpoint(Endpoint) error { return errNotLinux }

// DeleteEndpoint fails outside Linux.
func (p *PM) DeleteEndpoint(uint8) error { return errNotLinux }

// SetFlags fails outside Linux.
func (p *PM) SetFlags(Endpoint) error { return errNotLinux }

// Limits fails outside Linux.
func (p *PM) Limits() (Limits, error) { return Limits{}, errNotLinux }

// SetLimits fails outside Linux.
func (p *PM) SetLimits(Limits) error { return errNotLinux }

// EnsureEndpoints fails outside Linux.
func (p *PM) EnsureEndpoints(map[netip.Addr]int, Flags) ([]Endpoint, error) { return nil, errNotLinux }
