package intents

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClassifyFromSysfs(t *testing.T) {
	root := t.TempDir()
	mk := func(parts ...string) {
		require.NoError(t, os.MkdirAll(filepath.Join(append([]string{root}, parts...)...), 0o755))
	}
	mk("wlan0", "wireless")
	mk("wlp2s0", "phy80211")
	mk("mhi0")
	require.NoError(t, os.WriteFile(filepath.Join(root, "mhi0", "uevent"), []byte("INTERFACE=mhi0\nDEVTYPE=wwan\n"), 0o644))
	mk("enp3s0", "device")
	mk("veth0")
	old := sysfsRoot
	sysfsRoot = root
	t.Cleanup(func() { sysfsRoot = old })
	for name, want := range map[string]InterfaceType{
		"wlan0": TypeWifi, "wlp2s0": TypeWifi, "mhi0": TypeCellular, "rmnet_data0": TypeCellular,
		"wwan0": TypeCellular, "enp3s0": TypeWired, "veth0": TypeOther,
	} {
		assert.Equal(t, want, classify(net.Interface{Name: name}), name)
	}
	assert.Equal(t, TypeLoopback, classify(net.Interface{Name: "lo", Flags: net.FlagLoopback}))
}

func TestLinkDNSFromSystemdResolved(t *testing.T) {
	if !inInitNetns() {
		t.Skip("systemd-resolved state is read only in the initial network namespace")
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "3"), []byte("# This is private data. Do not parse.\nLLMNR=yes\n"+
		"SERVERS=192.0.2.53 2001:db8::53#dns.example 192.0.2.54:5353 bogus\nDOMAINS=corp.example ~routing.example\n"), 0o644))
	old := resolvedNetif
	resolvedNetif = dir
	t.Cleanup(func() { resolvedNetif = old })
	servers, search, ok := linkDNS(3)
	require.True(t, ok)
	assert.Equal(t, "[192.0.2.53:53 [2001:db8::53]:53 192.0.2.54:5353]", fmtAny(servers))
	assert.Equal(t, []string{"corp.example"}, search)
	_, _, ok = linkDNS(4)
	assert.False(t, ok)
}
