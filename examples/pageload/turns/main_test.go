package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeEnv makes the test binary act as a pageload that writes one load a
// run, its time taken from the environment.
const fakeEnv = "TURNS_FAKE_PAGELOAD_NS"

// readyEnv makes the test binary act as a pageload that tells the test
// at this address that it runs, then waits for an interrupt and says so.
const readyEnv = "TURNS_FAKE_PAGELOAD_READY"

func TestMain(m *testing.M) {
	if addr := os.Getenv(readyEnv); addr != "" {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, os.Interrupt) // before "ready": the test interrupts on it
		c, err := net.Dial("tcp", addr)
		if err != nil {
			os.Exit(5)
		}
		fmt.Fprintln(c, "ready")
		<-sigs
		fmt.Fprintln(c, "interrupted") // what pageload does here: delete its namespaces
		c.Close()
		os.Exit(0)
	}
	if ns := os.Getenv(fakeEnv); ns != "" {
		out := ""
		for i, a := range os.Args {
			if a == "-out" && i+1 < len(os.Args) {
				out = os.Args[i+1] // the last -out, as the flag package takes it
			}
		}
		if out == "" || ns == "fail" {
			fmt.Fprintln(os.Stderr, "fake pageload: failing as asked")
			os.Exit(3)
		}
		bench := "goos: linux\npkg: fake\nBenchmarkPageLoad/scenario=s/page=p/contender=eaf 1 " + ns + " ns/op\n"
		if err := os.WriteFile(filepath.Join(out, "loads.txt"), []byte(bench), 0o644); err != nil {
			os.Exit(4)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestParseArgs(t *testing.T) {
	builds, sets, err := parseArgs([]string{"base=/a", "var=/b", "--", "-scenario", "grid", "-reps", "1", "--", "-scenario", "symmetric"})
	require.NoError(t, err)
	assert.Equal(t, []build{{"base", "/a"}, {"var", "/b"}}, builds)
	assert.Equal(t, [][]string{{"-scenario", "grid", "-reps", "1"}, {"-scenario", "symmetric"}}, sets)

	for _, bad := range [][]string{
		{"base=/a", "--", "-reps", "1"},                 // one build compares nothing
		{"base=/a", "var=/b"},                           // no arguments
		{"base=/a", "var=/b", "--"},                     // an empty set
		{"base=/a", "var=/b", "--", "-reps", "1", "--"}, // an empty set at the end
		{"base=/a", "base=/b", "--", "-reps", "1"},      // a name twice
		{"base", "var=/b", "--", "-reps", "1"},          // no binary
		{"a/b=/a", "var=/b", "--", "-reps", "1"},        // a name that is a path
	} {
		_, _, err := parseArgs(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func TestOrderRotates(t *testing.T) {
	bs := []build{{"a", "1"}, {"b", "2"}, {"c", "3"}}
	names := func(r int) string {
		var s []string
		for _, b := range order(bs, r) {
			s = append(s, b.name)
		}
		return strings.Join(s, "")
	}
	assert.Equal(t, "abc", names(0))
	assert.Equal(t, "bca", names(1))
	assert.Equal(t, "cab", names(2))
	assert.Equal(t, "abc", names(3))
	assert.Equal(t, []build{{"a", "1"}, {"b", "2"}, {"c", "3"}}, bs, "order must not reorder the caller's slice")
}

// TestTurnsFilesLoadsByBuild runs two builds of a fake pageload for two
// rounds of two argument sets, then one more round into the same folder,
// and reads each build's file: its own loads only, one per run, with the
// configuration lines once.
func TestTurnsFilesLoadsByBuild(t *testing.T) {
	out := t.TempDir()
	var calls []string
	run := func(ctx context.Context, bin string, args []string, dir string) ([]byte, error) {
		calls = append(calls, bin+" "+strings.Join(args, " ")+" "+filepath.Base(filepath.Dir(dir))+"/"+filepath.Base(dir))
		return []byte("goos: linux\nBenchmarkX/" + bin + " 1 100 ns/op\n"), nil
	}
	builds := []build{{"base", "B"}, {"var", "V"}}
	sets := [][]string{{"-s", "1"}, {"-s", "2"}}
	require.NoError(t, runTurns(context.Background(), out, 2, builds, sets, run, io.Discard))
	assert.Equal(t, []string{
		"B -s 1 r1/base-1", "V -s 1 r1/var-1", "B -s 2 r1/base-2", "V -s 2 r1/var-2",
		"V -s 1 r2/var-1", "B -s 1 r2/base-1", "V -s 2 r2/var-2", "B -s 2 r2/base-2",
	}, calls, "round 2 starts with the other build")

	require.NoError(t, os.MkdirAll(filepath.Join(out, "r2", "base-1"), 0o755))
	calls = nil
	require.NoError(t, runTurns(context.Background(), out, 1, builds, sets[:1], run, io.Discard))
	assert.Equal(t, []string{"B -s 1 r3/base-1", "V -s 1 r3/var-1"}, calls, "a second set of rounds numbers on")

	base, err := os.ReadFile(filepath.Join(out, "base.txt"))
	require.NoError(t, err)
	assert.Equal(t, "goos: linux\n"+strings.Repeat("BenchmarkX/B 1 100 ns/op\n", 5), string(base))
	v, err := os.ReadFile(filepath.Join(out, "var.txt"))
	require.NoError(t, err)
	assert.Equal(t, "goos: linux\n"+strings.Repeat("BenchmarkX/V 1 100 ns/op\n", 5), string(v))
}

// TestTurnsStopsAtAFailedRun: a run that fails ends the set with its
// round, set and build named, and the loads before it stay filed.
func TestTurnsStopsAtAFailedRun(t *testing.T) {
	out := t.TempDir()
	n := 0
	run := func(ctx context.Context, bin string, args []string, dir string) ([]byte, error) {
		n++
		if n == 3 {
			return nil, errors.New("boom")
		}
		return []byte("BenchmarkX 1 100 ns/op\n"), nil
	}
	err := runTurns(context.Background(), out, 3, []build{{"base", "B"}, {"var", "V"}}, [][]string{{"-s"}}, run, io.Discard)
	require.ErrorContains(t, err, "round 2, set 1, var: boom")
	assert.Equal(t, 3, n)
	base, err := os.ReadFile(filepath.Join(out, "base.txt"))
	require.NoError(t, err)
	assert.Equal(t, "BenchmarkX 1 100 ns/op\n", string(base))
}

// TestRunPageloadExecs runs the test binary as a fake pageload: the -out
// turns adds is the one the program writes to, and a failing program's
// error names where its output went.
func TestRunPageloadExecs(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "r1", "base-1")

	t.Setenv(fakeEnv, "2500000000")
	bench, err := runPageload(context.Background(), self, []string{"-reps", "1", "-out", "elsewhere"}, dir)
	require.NoError(t, err)
	assert.Contains(t, string(bench), "BenchmarkPageLoad/scenario=s/page=p/contender=eaf 1 2500000000 ns/op")

	t.Setenv(fakeEnv, "fail")
	_, err = runPageload(context.Background(), self, []string{"-reps", "1"}, dir)
	require.ErrorContains(t, err, filepath.Join(dir, "stderr.txt"))
	msg, err := os.ReadFile(filepath.Join(dir, "stderr.txt"))
	require.NoError(t, err)
	assert.Contains(t, string(msg), "failing as asked")
}

// TestCancelInterruptsPageload: a set stopped (Ctrl-C) interrupts the
// pageload under way rather than killing it, so that it deletes its
// network namespaces (the testbed does that on SIGINT).
func TestCancelInterruptsPageload(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no interrupt signal to send to a process on windows")
	}
	self, err := os.Executable()
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	t.Setenv(readyEnv, ln.Addr().String())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := runPageload(ctx, self, nil, t.TempDir())
		done <- err
	}()
	c, err := ln.Accept()
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	cancel()
	line, err = r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "interrupted\n", line, "the program saw an interrupt")
	require.Error(t, <-done, "a stopped run is an error: its loads are not filed")
}
