//go:build unix

package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runCommand runs `intents run args...` and returns its exit status and
// what the program wrote.
func runCommand(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	code := run(context.Background(), append([]string{"run", "-knowledge", ""}, args...), &stdout, &stderr, loopManager(t, ""))
	return code, stdout.String(), stderr.String()
}

// `intents run` gives a program a proxy of its own through the usual
// environment variables, and ends with the program's exit status.
func TestRun(t *testing.T) {
	code, out, _ := runCommand(t, "--", "sh", "-c", "echo $HTTP_PROXY $http_proxy $HTTPS_PROXY $ALL_PROXY $NO_PROXY; exit 3")
	assert.Equal(t, 3, code, "the program's exit status")
	f := strings.Fields(out)
	require.Len(t, f, 5, out)
	assert.Regexp(t, `^http://[0-9a-f]{32}:[0-9a-f]{32}@127\.0\.0\.1:\d+$`, f[0], "with credentials of its own")
	assert.Equal(t, []string{f[0], f[0]}, f[1:3], "HTTP and HTTPS, in both cases")
	assert.Regexp(t, `^socks5h://[0-9a-f]{32}:[0-9a-f]{32}@127\.0\.0\.1:\d+$`, f[3])
	assert.True(t, strings.HasPrefix(f[4], "localhost,127.0.0.0/8,::1"), "this host bypasses the proxy: %s", f[4])
	for _, a := range hostAddrs() {
		assert.Contains(t, strings.Split(f[4], ","), a, "each of its own addresses too")
	}

	code, out, _ = runCommand(t, "-proxy", "http://192.0.2.1:8080", "--", "sh", "-c", "echo $HTTPS_PROXY $ALL_PROXY")
	assert.Equal(t, 0, code)
	assert.Equal(t, "http://192.0.2.1:8080 http://192.0.2.1:8080\n", out, "another proxy, named")

	for _, bad := range [][]string{{}, {"-proxy", "socks5://x:1", "--", "true"}, {"-proxy", "http://x:1", "-intents", "category=bulk", "--", "true"}, {"-intents", "nonsense", "--", "true"}} {
		code, _, _ := runCommand(t, bad...)
		assert.Equal(t, 2, code, "%q", bad)
	}
	code, _, errText := runCommand(t, "--", "/nonexistent/program")
	assert.Equal(t, 1, code, errText)
}

// A program that honours the variables (curl) reaches its origin
// through the proxy, with the intents given.
func TestRunCurl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("needs curl (apt-get install curl; .ci/run installs it)")
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "via "+r.Header.Get("Via"))
	}))
	defer origin.Close()
	// The origin is on this host, which NO_PROXY leaves out: --noproxy ""
	// puts it back, as a remote origin would be.
	code, out, errText := runCommand(t, "-intents", "category=bulk", "-v", "--", curl, "-sS", "--noproxy", "", origin.URL)
	require.Equal(t, 0, code, errText)
	assert.Equal(t, "via 1.1 intents-proxy", out)
	assert.Contains(t, errText, `intents="category=bulk"`, "the decision had the intents given")

	// Another program on the host that finds the proxy's listener, but
	// not its credentials, is refused.
	code, out, errText = runCommand(t, "--", "sh", "-c",
		`curl -sS -o /dev/null -w '%{http_code} ' --noproxy '' -x "http://${HTTP_PROXY#*@}" "$0"; curl -sS --noproxy '' "$0"`, origin.URL)
	require.Equal(t, 0, code, errText)
	assert.Equal(t, "407 via 1.1 intents-proxy", out, "without its credentials, then with them")
}
