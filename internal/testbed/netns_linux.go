package testbed

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Prefix starts the name of every namespace this package makes; the process
// ID follows, so a leftover of a crashed run can be told from a live one.
const Prefix = "intents-"

const netnsDir = "/var/run/netns"

var seq atomic.Uint64

// RequireRoot skips t unless the process can make network namespaces.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make network namespaces: run `sudo go test ./...` (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip command (apt-get install iproute2)")
	}
}

// Netns is a network namespace made for one test.
type Netns struct {
	Name string
}

// NewNetns makes a namespace (see CreateNetns) that is deleted when t ends.
// It skips t without root.
func NewNetns(t testing.TB, suffix string) *Netns {
	t.Helper()
	RequireRoot(t)
	n, err := CreateNetns(suffix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("removing namespace: %v", err)
		}
	})
	return n
}

// CreateNetns makes a namespace named Prefix+PID+"-"+suffix+N with its
// loopback up. It first removes namespaces left over by processes that no
// longer run. Close deletes it; so does an interrupt of the process.
func CreateNetns(suffix string) (*Netns, error) {
	RemoveLeftovers()
	n := &Netns{Name: fmt.Sprintf("%s%d-%s%d", Prefix, os.Getpid(), suffix, seq.Add(1))}
	if err := run("ip", "netns", "add", n.Name); err != nil {
		return nil, err
	}
	track(n.Name)
	if err := n.IP("link", "set", "lo", "up"); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// Close deletes the namespace, and with it every interface inside it.
func (n *Netns) Close() error {
	defer untrack(n.Name)
	return run("ip", "netns", "del", n.Name)
}

// Live namespaces of this process, deleted on SIGINT or SIGTERM. The signal
// watcher runs only while there are any, so it never outlives them.
var live struct {
	sync.Mutex
	names map[string]bool
	sigs  chan os.Signal
	done  chan struct{}
}

func track(name string) {
	live.Lock()
	defer live.Unlock()
	if live.names == nil {
		live.names = map[string]bool{}
	}
	live.names[name] = true
	if live.sigs != nil {
		return
	}
	live.sigs, live.done = make(chan os.Signal, 1), make(chan struct{})
	signal.Notify(live.sigs, os.Interrupt, syscall.SIGTERM)
	go func(sigs chan os.Signal, done chan struct{}) {
		defer close(done)
		sig, ok := <-sigs
		if !ok {
			return
		}
		live.Lock()
		for name := range live.names {
			_ = run("ip", "netns", "del", name)
		}
		live.Unlock()
		signal.Reset(sig)
		_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
	}(live.sigs, live.done)
}

func untrack(name string) {
	live.Lock()
	delete(live.names, name)
	if len(live.names) > 0 || live.sigs == nil {
		live.Unlock()
		return
	}
	signal.Stop(live.sigs)
	close(live.sigs)
	done := live.done
	live.sigs, live.done = nil, nil
	live.Unlock()
	<-done
}

// RemoveLeftovers deletes namespaces with Prefix whose process is gone.
func RemoveLeftovers() {
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), Prefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		_ = run("ip", "netns", "del", e.Name())
	}
}

// IP runs `ip -n NAME args...`.
func (n *Netns) IP(args ...string) error {
	return run("ip", append([]string{"-n", n.Name}, args...)...)
}

// MustIP is IP that fails t on error.
func (n *Netns) MustIP(t testing.TB, args ...string) {
	t.Helper()
	if err := n.IP(args...); err != nil {
		t.Fatal(err)
	}
}

// Do runs fn on a thread inside the namespace. Sockets fn creates belong to
// the namespace for their whole life, whichever goroutine uses them later;
// goroutines fn starts do not run inside it.
func (n *Netns) Do(fn func() error) error {
	target, err := os.Open(filepath.Join(netnsDir, n.Name))
	if err != nil {
		return err
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", n.Name, err)
	}
	fnErr := fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread is in the wrong namespace: keep it locked so it dies
		// with this goroutine instead of running other goroutines.
		return fmt.Errorf("setns back: %w", err)
	}
	runtime.UnlockOSThread()
	return fnErr
}

// ChildEnv is set in the environment of a test process that RunTest starts
// inside a namespace.
const ChildEnv = "INTENTS_TESTBED_CHILD"

// RunTest runs the test named name of this test binary again, in a new
// process inside n, with ChildEnv=arg, and fails t if it fails. Everything
// the child does (every goroutine, every socket) happens inside n, which a
// multi-threaded Go process cannot arrange for itself.
func RunTest(t testing.TB, n *Netns, name, arg string) {
	t.Helper()
	args := []string{"netns", "exec", n.Name, os.Args[0], "-test.run", "^" + name + "$", "-test.v", "-test.count=1"}
	cmd := exec.Command("ip", args...)
	// The race detector sleeps 1 s at exit by default; the parent waits.
	cmd.Env = append(os.Environ(), ChildEnv+"="+arg, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	text := out.String()
	if err != nil || !strings.Contains(text, "--- PASS: "+name) {
		t.Fatalf("%s %s inside %s: %v\n%s", name, arg, n.Name, err, text)
	}
	t.Logf("%s %s inside %s passed:\n%s", name, arg, n.Name, indent(text))
}

func indent(s string) string {
	return "\t" + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n\t")
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Sysctl sets the sysctl key (e.g. "net/ipv4/tcp_fastopen") inside n.
func (n *Netns) Sysctl(key, value string) error {
	return run("ip", "netns", "exec", n.Name, "sh", "-c", "echo "+value+" > /proc/sys/"+key)
}

// DialContext returns a dial function (for http.Transport.DialContext and
// the like) that creates its sockets inside n with d (nil: a zero
// net.Dialer). The connections then work from any goroutine.
func (n *Netns) DialContext(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if d == nil {
		d = &net.Dialer{}
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := n.Do(func() error {
			var err error
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// ChildArg is the argument RunTest gave the child test t (the half of
// parent that runs inside a namespace); outside, it skips t.
func ChildArg(t testing.TB, parent string) string {
	t.Helper()
	arg := os.Getenv(ChildEnv)
	if arg == "" {
		t.Skip("child half of " + parent + ": runs only inside the namespace that test makes")
	}
	return arg
}

// SkipIfShort skips a test that takes long (about took) under go test
// -short; CI runs it.
func SkipIfShort(t testing.TB, took string) {
	t.Helper()
	if testing.Short() {
		t.Skip("takes about " + took + ": skipped with -short (CI runs it)")
	}
}
