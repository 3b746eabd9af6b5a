//go:build !linux

package tcpinfo

import (
	"errors"
	"syscall"
)

// Get is not implemented outside Linux: RTTs then come from connection
// set-up times only.
func Get(syscall.RawConn) (Info, error) { return Info{}, errors.ErrUnsupported }
