//go:build !linux

package sockopt

import (
	"errors"
	"syscall"
)

// BindAddressNoPort is Linux only; elsewhere the port is chosen at bind().
func BindAddressNoPort(syscall.RawConn) error { return errors.ErrUnsupported }
