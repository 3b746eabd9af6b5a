// Command turns runs builds of pageload in turns, so that two versions of
// the library are compared on the same noisy machine in the same minutes:
// each round runs every argument set once with every build, the builds in
// an order rotated from round to round, and each build's loads gather in a
// benchstat file of its own.
//
//	git worktree add --detach /tmp/base main && (cd /tmp/base/examples/pageload && go build -o /tmp/pl-base .)
//	(cd examples/pageload && go build -o /tmp/pl-var .)
//	sudo go run ./examples/pageload/turns -rounds 12 -out ab base=/tmp/pl-base var=/tmp/pl-var \
//		-- -scenario grid -workload 32x100KB,mixed1,mixed2 -contenders eaf -reps 1 \
//		-- -scenario symmetric,asymmetric -workload 32x100KB,mixed1,mixed2 -contenders eaf -reps 1
//	go run golang.org/x/perf/cmd/benchstat -filter .unit:sec/op ab/base.txt ab/var.txt
//
// A load is one line of a build's file (pageload's loads.txt), named by
// its scenario, page, queue, -hosts and -conns where not the defaults, and
// contender, so benchstat sets each cell's
// loads of one build against the other's, with a Mann-Whitney U test and a
// geometric mean over the cells; -filter narrows that to the cells a
// change acts in (for instance '/scenario:(symmetric OR 2M:50ms+5M:50ms)').
// Each run's own output (tables, CSV files, the trace if asked for) stays
// in OUT/rROUND/NAME-SET. A second turns into the same folder adds rounds
// to the files, so a set can be extended after it was read, its rounds
// numbered on from those already there.
//
// Rotating the order matters: a build that always ran second would meet
// the machine in another state (a warmer cache, the other build's
// leftovers in the kernel) every time.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"time"
)

// build is one pageload binary under the name its loads are filed by.
type build struct{ name, bin string }

// runFunc runs bin with args, its output to dir, and returns the
// benchstat file it wrote.
type runFunc func(ctx context.Context, bin string, args []string, dir string) ([]byte, error)

func main() {
	log.SetFlags(0)
	log.SetPrefix("turns: ")
	rounds := flag.Int("rounds", 6, "rounds: each runs every argument set once with every build")
	out := flag.String("out", "turns-results", "folder for each build's NAME.txt and the runs' own output")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: turns [-rounds N] [-out DIR] NAME=PAGELOAD... -- PAGELOAD-ARGS [-- PAGELOAD-ARGS]...")
		flag.PrintDefaults()
	}
	flag.Parse()
	builds, sets, err := parseArgs(flag.Args())
	if err == nil && *rounds < 1 {
		err = fmt.Errorf("-rounds %d: want at least one", *rounds)
	}
	if err != nil {
		log.Print(err)
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := runTurns(ctx, *out, *rounds, builds, sets, runPageload, os.Stderr); err != nil {
		log.Fatal(err)
	}
	var files []string
	for _, b := range builds {
		files = append(files, filepath.Join(*out, b.name+".txt"))
	}
	fmt.Printf("go run golang.org/x/perf/cmd/benchstat -filter .unit:sec/op %s\n", strings.Join(files, " "))
}

// parseArgs splits NAME=BIN ... -- ARGS [-- ARGS]... into builds and
// argument sets.
func parseArgs(args []string) ([]build, [][]string, error) {
	var builds []build
	seen := map[string]bool{}
	for len(args) > 0 && args[0] != "--" {
		name, bin, ok := strings.Cut(args[0], "=")
		if !ok || name == "" || bin == "" || strings.ContainsAny(name, `/\`) {
			return nil, nil, fmt.Errorf("%q: want NAME=PAGELOAD-BINARY", args[0])
		}
		if seen[name] {
			return nil, nil, fmt.Errorf("build %q named twice", name)
		}
		seen[name] = true
		builds = append(builds, build{name, bin})
		args = args[1:]
	}
	if len(builds) < 2 {
		return nil, nil, errors.New("want at least two builds to compare")
	}
	var sets [][]string
	for len(args) > 0 {
		args = args[1:] // the "--"
		i := 0
		for i < len(args) && args[i] != "--" {
			i++
		}
		if i == 0 {
			return nil, nil, errors.New("an empty argument set after --")
		}
		sets = append(sets, args[:i:i])
		args = args[i:]
	}
	if len(sets) == 0 {
		return nil, nil, errors.New("no pageload arguments: give them after --")
	}
	return builds, sets, nil
}

// order is the builds' order in round r: rotated by one each round, so
// that with two builds each goes first in every other round.
func order(builds []build, r int) []build {
	k := r % len(builds)
	return append(builds[k:len(builds):len(builds)], builds[:k]...)
}

// runTurns runs the rounds, appending each run's loads to OUT/NAME.txt as
// soon as the run ends, so that an interrupted set keeps its whole rounds'
// loads (and those of the round under way: a round is read by cell, each
// build's loads on their own).
func runTurns(ctx context.Context, out string, rounds int, builds []build, sets [][]string, run runFunc, progress io.Writer) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	first, err := nextRound(out)
	if err != nil {
		return err
	}
	for r := first; r < first+rounds; r++ {
		for si, args := range sets {
			for _, b := range order(builds, r-1) {
				dir := filepath.Join(out, fmt.Sprintf("r%d", r), fmt.Sprintf("%s-%d", b.name, si+1))
				fmt.Fprintf(progress, "round %d of %d, set %d, %s\n", r-first+1, rounds, si+1, b.name)
				bench, err := run(ctx, b.bin, args, dir)
				if err != nil {
					return fmt.Errorf("round %d, set %d, %s: %w", r, si+1, b.name, err)
				}
				if err := appendLoads(filepath.Join(out, b.name+".txt"), bench); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// nextRound is the number after the highest rN folder in out (1 if none).
func nextRound(out string) (int, error) {
	entries, err := os.ReadDir(out)
	if err != nil {
		return 0, err
	}
	next := 1
	for _, e := range entries {
		var n int
		if _, err := fmt.Sscanf(e.Name(), "r%d", &n); err == nil && e.IsDir() && fmt.Sprintf("r%d", n) == e.Name() {
			next = max(next, n+1)
		}
	}
	return next, nil
}

// appendLoads adds bench's lines to the file at path. The configuration
// lines (goos: linux, pkg: ...) are written only while the file is new:
// benchstat reads them as applying to every line after, the same for each
// run.
func appendLoads(path string, bench []byte) error {
	fi, err := os.Stat(path) // only whether it has lines: it grows with every run
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	started := err == nil && fi.Size() > 0
	var add bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(bench))
	for sc.Scan() {
		line := sc.Text()
		if started && !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		add.WriteString(line)
		add.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(add.Bytes()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runPageload runs a pageload binary with its output in dir and returns
// its loads.txt.
func runPageload(ctx context.Context, bin string, args []string, dir string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	stdout, err := os.Create(filepath.Join(dir, "stdout.txt"))
	if err != nil {
		return nil, err
	}
	defer stdout.Close()
	stderr, err := os.Create(filepath.Join(dir, "stderr.txt"))
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	// pageload's flags take the last value given, so this -out wins.
	cmd := exec.CommandContext(ctx, bin, append(args[:len(args):len(args)], "-out", dir)...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Interrupted, pageload deletes its network namespaces on SIGINT;
	// killed, it would leave them behind. Killed only if it has not
	// ended a while after.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w (its output: %s)", bin, err, stderr.Name())
	}
	return os.ReadFile(filepath.Join(dir, "loads.txt"))
}
