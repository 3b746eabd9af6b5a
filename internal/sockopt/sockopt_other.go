//go:build !linux && !darwin && !windows

package sockopt

import "errors"

// No per-interface option here: the caller binds the source address only.
func bindToInterface(uintptr, int, string, bool) error { return errors.ErrUnsupported }
