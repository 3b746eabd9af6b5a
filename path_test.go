package intents

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A refresh reads interfaces, addresses and DNS state (netlink, sysfs,
// files) without the Manager's lock: while one is stuck there, the table
// and its change channel stay readable, and what it found is swapped in
// when it ends.
func TestRefreshDiscoversOutsideTheManagerLock(t *testing.T) {
	m := loManager(t, nil)
	defer m.Close()
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release) // before Close, if the test fails while it waits
	m.testHookDiscovered = func(paths []*Path) []*Path {
		close(entered)
		<-release
		return paths
	}
	refreshed := make(chan error, 1)
	go func() { refreshed <- m.Refresh() }()
	<-entered
	within(t, "the table and its change channel during a refresh's discovery", func() {
		assert.NotEmpty(t, m.Paths())
		assert.NotNil(t, m.Changed())
	})
	release <- struct{}{}
	require.NoError(t, <-refreshed)
}

// A refresh that began before another and ends after it does not put the
// older table it found over the newer one.
func TestAnOlderRefreshDoesNotReplaceANewerTable(t *testing.T) {
	m := loManager(t, nil)
	defer m.Close()
	before := m.Paths()
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	m.testHookDiscovered = func(paths []*Path) []*Path {
		close(entered)
		<-release
		// What it found is older than what the newer refresh found:
		// here, its interface still down.
		old := *paths[0]
		old.Up = false
		return []*Path{&old}
	}
	older := make(chan error, 1)
	go func() { older <- m.Refresh() }()
	<-entered
	m.testHookDiscovered = nil
	require.NoError(t, m.Refresh())
	release <- struct{}{}
	require.NoError(t, <-older)
	require.Len(t, m.Paths(), 1)
	assert.True(t, m.Paths()[0].Up, "the newer table stays")
	assert.Equal(t, before[0].Name, m.Paths()[0].Name)
}
