//go:build unix

package intents

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A FIFO in the knowledge file's place is not read (opening it would
// block until someone writes): one warning, and the Manager starts.
func TestKnowledgeFileThatIsAFIFO(t *testing.T) {
	file := filepath.Join(t.TempDir(), "paths.json")
	require.NoError(t, syscall.Mkfifo(file, 0o600))
	var log bytes.Buffer
	k := loadKnowledge(file, slog.New(slog.NewTextHandler(&log, nil)))
	assert.Empty(t, k.networks)
	assert.Equal(t, 1, strings.Count(log.String(), "\n"), log.String())
	assert.Contains(t, log.String(), "not a regular file")
}
