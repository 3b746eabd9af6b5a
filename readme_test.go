package intents_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goBlock is a fenced Go block of a Markdown file.
var goBlock = regexp.MustCompile("(?s)```go\n(.*?)```")

// snippetImports are what the README's fragments may use; each is also
// used by the wrapper, so that a fragment need not use all of them.
const snippetImports = `import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/policy"
)

var (
	_ = context.Background
	_ = fmt.Println
	_ = io.Copy
	_ = log.Fatal
	_ = http.NewRequest
	_ = time.Second
	_ = intents.WithIntents
	_ = policy.EAF{}
)
`

// Every Go block of the README builds: a whole program as it is, a
// fragment as the body of a function (with the imports above).
func TestREADMESnippets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds with the go command; -short skips it")
	}
	text, err := os.ReadFile("README.md")
	require.NoError(t, err)
	blocks := goBlock.FindAllStringSubmatch(string(text), -1)
	require.GreaterOrEqual(t, len(blocks), 5, "the quick start and the tour")
	// Inside the module, so that its packages resolve; "_" keeps the
	// folder out of ./... patterns.
	dir, err := os.MkdirTemp(".", "_readme")
	require.NoError(t, err)
	defer os.RemoveAll(dir)
	write := func(name, code string) {
		sub := filepath.Join(dir, name)
		require.NoError(t, os.Mkdir(sub, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(sub, name+".go"), []byte(code), 0o644))
	}
	var fragments strings.Builder
	fragments.WriteString("package fragments\n\n" + snippetImports)
	programs := 0
	for i, b := range blocks {
		code := b[1]
		if strings.HasPrefix(code, "package main") {
			programs++
			write(fmt.Sprintf("program%d", programs), code)
			continue
		}
		fmt.Fprintf(&fragments, "\n// README block %d\nfunc snippet%d() {\n%s}\n", i+1, i, code)
	}
	write("fragments", fragments.String())
	// One by one: a pattern with "..." would skip the "_" folder.
	pkgs, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, pkg := range pkgs {
		out, err := exec.Command("go", "build", "-o", os.DevNull, "./"+filepath.Join(dir, pkg.Name())).CombinedOutput()
		assert.NoError(t, err, "%s", out)
	}
}
