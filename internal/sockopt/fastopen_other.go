//go:build !linux

package sockopt

import (
	"errors"
	"syscall"
)

// FastOpenConnect is Linux only; elsewhere the caller dials without TFO.
func FastOpenConnect(syscall.RawConn) error { return errors.ErrUnsupported }

// SentSYNData is Linux only.
func SentSYNData(syscall.RawConn) (bool, error) { return false, errors.ErrUnsupported }
