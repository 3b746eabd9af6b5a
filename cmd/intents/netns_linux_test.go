package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
)

// TestNetnsCLI runs paths and get inside the client namespace of the
// emulated testbed (10 Mbit/s / 20 ms and 5 Mbit/s / 60 ms).
func TestNetnsCLI(t *testing.T) {
	testbed.RequireRoot(t)
	tb := testbed.New(t, testbed.Spec{
		Paths: []testbed.PathSpec{testbed.Symmetric(20*time.Millisecond, 10e6), testbed.Symmetric(60*time.Millisecond, 5e6)},
	})
	web, err := tb.StartWeb(testbed.WebOptions{})
	require.NoError(t, err)
	testbed.RunTest(t, tb.Client, "TestNetnsCLIChild", "cli")

	// A program that ignores proxy settings, run with -transparent: its
	// connections go through the proxy, on the path its intents require.
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl (apt-get install curl; .ci/run installs it)")
	}
	testbed.RunTest(t, tb.Client, "TestNetnsCLIChild", "transparent")
	var seen []string
	for _, r := range web.Requests() {
		if strings.Contains(r.URI, "id=transparent") {
			seen = append(seen, r.Remote.Addr().String()+" "+r.Via)
		}
	}
	assert.Equal(t, []string{tb.Paths[1].ClientAddr.String() + " "}, seen,
		"one request, from path 2's address, through no HTTP proxy (a tunnel)")
}

func TestNetnsCLIChild(t *testing.T) {
	kase := testbed.ChildArg(t, "TestNetnsCLI")
	mf := func(cfg intents.Config) (*intents.Manager, error) {
		cfg.Paths, cfg.NoWatch = []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}}, true
		return intents.NewManager(cfg)
	}
	if kase == "transparent" {
		runTransparent(t, mf)
		return
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"paths", "-json", "-probe", "10.71.100.1:80"}, &stdout, &stderr, mf)
	require.Equal(t, 0, code, stderr.String())
	var paths []pathJSON
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &paths))
	require.Len(t, paths, 2)
	t.Logf("probed: %s %.1f ms, %s %.1f ms", paths[0].Name, paths[0].Estimate.RTTMillis, paths[1].Name, paths[1].Estimate.RTTMillis)
	assert.Equal(t, []string{"10.71.1.1"}, paths[0].Addresses)
	assert.True(t, paths[0].Estimate.Measured)
	assert.InDelta(t, 20, paths[0].Estimate.RTTMillis, 10, "path 1's RTT, measured")
	assert.InDelta(t, 60, paths[1].Estimate.RTTMillis, 15, "path 2's RTT, measured")

	const size = 6_000_000
	file := filepath.Join(t.TempDir(), "obj")
	stdout.Reset()
	code = run(context.Background(), []string{"get", "-aggregate", "-json", "-o", file, "http://10.71.100.1/obj/6000000"}, &stdout, &stderr, mf)
	require.Equal(t, 0, code, stderr.String())
	var sum getSummary
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &sum))
	t.Logf("get -aggregate: %d bytes in %.2f s, per path %+v", sum.Bytes, sum.Seconds, sum.Paths)
	body, err := os.ReadFile(file)
	require.NoError(t, err)
	assert.Equal(t, testbed.ObjectSum(size), sha256.Sum256(body), "the object, byte for byte")
	assert.Greater(t, sum.Paths["p1"].Bytes, int64(0))
	assert.Greater(t, sum.Paths["p2"].Bytes, int64(0), "both paths carried ranges")
}

// intentsTables lists the nftables tables of `run -transparent`.
func intentsTables(t *testing.T) string {
	out, err := exec.Command("nft", "list", "tables").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var tables []string
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, "intents_run_") {
			tables = append(tables, strings.TrimSpace(line))
		}
	}
	return strings.Join(tables, "; ")
}

// runTransparent runs curl, told to ignore proxy settings, under `intents
// run -transparent` with intents that require path 2; then checks that
// the rules and the cgroup are gone, and that a killed intents takes its
// program with it, and leaves rules that send nothing anywhere: to a
// privileged port, which no other user can take, for the next run to
// remove.
func runTransparent(t *testing.T, mf managerFunc) {
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft (apt-get install nftables; .ci/run installs it)")
	}
	root, err := cgroup2Root()
	if err != nil {
		// ip netns exec gave this process a /sys of its own, without the
		// cgroup2 hierarchy: mount it, in this mount namespace alone.
		root = t.TempDir()
		require.NoError(t, syscall.Mount("none", root, "cgroup2", 0, ""))
		t.Cleanup(func() { syscall.Unmount(root, 0) })
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"run", "-transparent", "-knowledge", "", "-intents", "require=p2", "--",
		"curl", "-sS", "--fail", "--noproxy", "*", "-o", "/dev/null", "http://10.71.100.1/obj/100000?id=transparent"}, &stdout, &stderr, mf)
	require.Equal(t, 0, code, stderr.String())
	assert.Empty(t, intentsTables(t), "the rules are gone with the program")
	assert.NoDirExists(t, filepath.Join(root, cgroupPrefix+strconv.Itoa(os.Getpid())), "the cgroup is gone")

	// The same, as a process of its own, terminated while its program
	// runs: it removes its rules; killed: it leaves them, for the next run
	// to remove.
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		helper := exec.Command(os.Args[0], "-test.run=^TestNetnsRunHelper$")
		helper.Env = append(os.Environ(), "INTENTS_RUN_HELPER="+root)
		require.NoError(t, helper.Start())
		require.Eventually(t, func() bool { return intentsTables(t) != "" }, 20*time.Second, 10*time.Millisecond, "the helper's rules")
		require.NoError(t, helper.Process.Signal(sig))
		helper.Wait()
		cgroup := filepath.Join(root, cgroupPrefix+strconv.Itoa(helper.Process.Pid))
		if sig == syscall.SIGTERM {
			assert.Empty(t, intentsTables(t), "terminated, intents leaves no rules")
			assert.NoDirExists(t, cgroup, "nor its cgroup")
			continue
		}
		assert.NotEmpty(t, intentsTables(t), "killed, intents leaves its rules")
		ruleset, err := exec.Command("nft", "list", "table", "ip", tablePrefix+strconv.Itoa(helper.Process.Pid)).CombinedOutput()
		require.NoError(t, err, "%s", ruleset)
		port := regexp.MustCompile(`redirect to :(\d+)`).FindSubmatch(ruleset)
		require.NotNil(t, port, "%s", ruleset)
		n, _ := strconv.Atoi(string(port[1]))
		assert.Less(t, n, 1024, "to a privileged port, which only root can take")
		// Its program (sleep) dies with it: the cgroup empties by itself.
		require.Eventually(t, func() bool {
			procs, _ := os.ReadFile(filepath.Join(cgroup, "cgroup.procs"))
			return len(procs) == 0
		}, 10*time.Second, 10*time.Millisecond, "the program does not outlive intents")
		code := run(context.Background(), []string{"run", "-transparent", "-knowledge", "", "--", "true"}, &stdout, &stderr, mf)
		require.Equal(t, 0, code, stderr.String())
		assert.Empty(t, intentsTables(t), "the next run removed the rules left")
		assert.NoDirExists(t, cgroup, "and the cgroup")
	}
}

// TestNetnsRunHelper is `intents run -transparent -- sleep 60`, for
// runTransparent to end, with the cgroup2 hierarchy runTransparent
// mounted.
func TestNetnsRunHelper(t *testing.T) {
	if os.Getenv("INTENTS_RUN_HELPER") == "" {
		t.Skip("child half of TestNetnsCLI: runs only as its helper process")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	mf := func(cfg intents.Config) (*intents.Manager, error) {
		cfg.Paths, cfg.NoWatch = []intents.PathConfig{{Interface: "p1"}, {Interface: "p2"}}, true
		return intents.NewManager(cfg)
	}
	run(ctx, []string{"run", "-transparent", "-knowledge", "", "--", "sleep", "60"}, os.Stdout, os.Stderr, mf)
}
