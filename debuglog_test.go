package intents

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// DebugLog is a slog handler that passes on the messages of a Manager's
// debug log, for tests to wait on (exported for the package's external
// tests). A message nobody waits for is dropped once the channel is full.
type DebugLog chan string

func (d DebugLog) Enabled(context.Context, slog.Level) bool { return true }
func (d DebugLog) Handle(_ context.Context, r slog.Record) error {
	select {
	case d <- r.Message:
	default:
	}
	return nil
}
func (d DebugLog) WithAttrs([]slog.Attr) slog.Handler { return d }
func (d DebugLog) WithGroup(string) slog.Handler      { return d }

// Await waits for the message msg, failing the test after 10 s.
func (d DebugLog) Await(t *testing.T, msg string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case m := <-d:
			if m == msg {
				return
			}
		case <-deadline:
			t.Fatalf("no %q in the debug log", msg)
		}
	}
}
