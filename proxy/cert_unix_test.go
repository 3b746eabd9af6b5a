//go:build unix

package proxy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A directory another user owns is not the proxy's own: that user could
// read or replace the authority's key.
func TestOwnCertificateDirectoryOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user: run `sudo go test ./proxy/` (CI runs as root)")
	}
	dir := filepath.Join(t.TempDir(), "intents")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.Chown(dir, 65534, 65534)) // nobody
	_, err := LoadOwnCertificate(dir, []string{"localhost"})
	assert.ErrorContains(t, err, "belongs to another user")
}
