//go:build !linux

package testbed

import "testing"

// RequireRoot skips t: network namespaces exist only on Linux.
func RequireRoot(t testing.TB) {
	t.Helper()
	t.Skip("network namespaces need Linux")
}
