package intents

import (
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/testbed"
)

// TestNetnsWatchOverflow floods the watcher's netlink socket with address
// events until the kernel drops some (ENOBUFS) and checks that the table
// still ends up right, because an overflow makes the Manager re-list.
func TestNetnsWatchOverflow(t *testing.T) {
	testbed.RequireRoot(t)
	ns := testbed.NewNetns(t, "watch")
	ns.MustIP(t, "link", "add", "flood0", "type", "veth", "peer", "name", "flood1")
	ns.MustIP(t, "link", "set", "flood0", "up")
	ns.MustIP(t, "link", "set", "flood1", "up")
	testbed.RunTest(t, ns, "TestNetnsWatchOverflowChild", "flood")
}

func TestNetnsWatchOverflowChild(t *testing.T) {
	testbed.ChildArg(t, "TestNetnsWatchOverflow")
	watchRcvBuf = 1 // the kernel rounds it up to its minimum
	overflow := make(chan struct{})
	var once sync.Once
	onWatchOverflow = func() { once.Do(func() { close(overflow) }) }
	m, err := NewManager(Config{Paths: []PathConfig{{Interface: "flood0"}}})
	require.NoError(t, err)
	defer m.Close()
	const n = 400
	var batch strings.Builder
	for i := range n {
		fmt.Fprintf(&batch, "addr add 10.72.%d.%d/32 dev flood0\n", i/200, i%200+1)
	}
	// The handler re-lists on every wake-up; pause it while the kernel queues
	// events so the small buffer overflows.
	m.mu.Lock()
	cmd := exec.Command("ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(batch.String())
	out, err := cmd.CombinedOutput()
	m.mu.Unlock()
	require.NoError(t, err, "%s", out)

	changed := m.Changed()
	deadline := time.After(10 * time.Second)
	for len(m.Path("flood0").Addrs) != n {
		select {
		case <-changed:
			changed = m.Changed()
		case <-deadline:
			t.Fatalf("table has %d of %d addresses", len(m.Path("flood0").Addrs), n)
		}
	}
	select {
	case <-overflow: // the kernel reported lost events, and the table is right all the same
	case <-deadline:
		t.Fatal("no overflow: the flood did not fill the socket")
	}
	t.Logf("overflows seen: %d", watchOverflows.Load())
}
