package testbed

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// StartDaemon starts cmd, a server that gives no sign of being ready but
// accepting connections, and returns once ready (a dial to it) succeeds;
// when t ends it sends the process stop and waits for it. If the process
// exits first, t fails with its output (cmd's, if it was not set).
func StartDaemon(t testing.TB, cmd *exec.Cmd, ready func() error, stop os.Signal) {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "daemon-*.out")
	require.NoError(t, err)
	if cmd.Stdout == nil && cmd.Stderr == nil {
		cmd.Stdout, cmd.Stderr = out, out
	}
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(stop)
		<-exited
		out.Close()
	})
	for attempt := 0; ; attempt++ {
		err := ready()
		if err == nil {
			return
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(out.Name())
			t.Fatalf("%s exited: %v\n%s", cmd.Path, err, log)
		case <-time.After(time.Duration(attempt+1) * 20 * time.Millisecond):
		}
		require.Less(t, attempt, 50, "%s does not accept connections: %v", cmd.Path, err)
	}
}
