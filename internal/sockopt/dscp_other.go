//go:build !unix

package sockopt

import (
	"errors"
	"syscall"
)

// SetDSCP is not implemented here (Windows wants QoS2 policies instead).
func SetDSCP(syscall.RawConn, int, bool) error { return errors.ErrUnsupported }
