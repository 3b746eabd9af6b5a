package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/internal/testbed"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// TestMain keeps the commands' knowledge (their -knowledge default, in
// the user's cache directory) in a folder of the tests' own.
func TestMain(m *testing.M) {
	cache, err := os.MkdirTemp("", "intents-cache-")
	if err != nil {
		panic(err)
	}
	os.Setenv("XDG_CACHE_HOME", cache)
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.RemoveAll(cache)
	os.Exit(code)
}

// fakePaths is a path table as a laptop with Wi-Fi and LTE might have it.
func fakePaths() []*intents.Path {
	return []*intents.Path{
		{Name: "wlan0", Index: 3, Type: intents.TypeWifi, Up: true,
			Addrs:     []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")},
			DNS:       []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:53")},
			DNSSource: "systemd-resolved",
			Prior:     intents.Estimate{RTT: 20 * time.Millisecond, Bandwidth: 50e6}},
		{Name: "wwan0", Index: 4, Type: intents.TypeCellular, Up: true, Expensive: true,
			Addrs:     []netip.Addr{netip.MustParseAddr("198.51.100.7")},
			DNS:       []netip.AddrPort{netip.MustParseAddrPort("198.51.100.1:53")},
			DNSSource: "config",
			Prior:     intents.Estimate{RTT: 60 * time.Millisecond, Bandwidth: 10e6}},
		{Name: "eth1", Index: 5, Type: intents.TypeWired, Constrained: true},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to write it")
	assert.Equal(t, string(want), string(got))
}

func TestPathsGolden(t *testing.T) {
	var js, text bytes.Buffer
	require.NoError(t, printPaths(&js, fakePaths(), true))
	golden(t, "paths.json", js.Bytes())
	var decoded []pathJSON
	require.NoError(t, json.Unmarshal(js.Bytes(), &decoded), "valid JSON")
	assert.Len(t, decoded, 3)
	require.NoError(t, printPaths(&text, fakePaths(), false))
	golden(t, "paths.txt", text.Bytes())
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		nil, {"bogus"}, {"paths", "extra"}, {"resolve"}, {"get"}, {"get", "-policy", "nope", "http://x/"},
		{"get", "-intents", "category=nonsense", "http://x/"}, {"get", "ftp://x/"}, {"get", "-nosuchflag"},
	} {
		var stderr bytes.Buffer
		code := run(context.Background(), args, io.Discard, &stderr, loopManager(t, ""))
		assert.Equal(t, 2, code, "%q: %s", args, stderr.String())
		assert.Contains(t, stderr.String(), "usage:", "%q", args)
	}
	var stdout bytes.Buffer
	assert.Equal(t, 0, run(context.Background(), []string{"help"}, &stdout, io.Discard, loopManager(t, "")))
	assert.Contains(t, stdout.String(), "intents get")
}

// loopManager makes Managers of the loopback path alone, with dnsServer
// (if set) as its DNS server.
func loopManager(t *testing.T, dnsServer string) managerFunc {
	// No system name servers: nothing is ever sent beyond loopback.
	empty := filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	return func(cfg intents.Config) (*intents.Manager, error) {
		pc := intents.PathConfig{Interface: "lo"}
		if dnsServer != "" {
			pc.DNS = []string{dnsServer}
		}
		cfg.Paths, cfg.NoWatch, cfg.ResolvConf = []intents.PathConfig{pc}, true, empty
		return intents.NewManager(cfg)
	}
}

func TestGet(t *testing.T) {
	const size = 3_000_000
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("ETag", `"x"`)
		http.ServeContent(w, r, "", time.Time{}, testbed.NewObject(size))
	}))
	defer srv.Close()
	want := testbed.ObjectSum(size)
	for _, extra := range [][]string{nil, {"-aggregate"}, {"-twostep", "8192", "-policy", "rr"}} {
		file := filepath.Join(t.TempDir(), "out")
		args := append(append([]string{"get", "-json", "-o", file}, extra...), srv.URL+"/obj")
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, &stdout, &stderr, loopManager(t, ""))
		require.Equal(t, 0, code, "%q: %s", args, stderr.String())
		var sum getSummary
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &sum), stdout.String())
		assert.EqualValues(t, size, sum.Bytes)
		assert.Equal(t, 200, sum.Status)
		var bytesIn int64
		for _, u := range sum.Paths {
			bytesIn += u.Bytes
		}
		assert.EqualValues(t, size, bytesIn, "%q: every byte accounted to a path", extra)
		body, err := os.ReadFile(file)
		require.NoError(t, err)
		assert.Equal(t, want, sha256.Sum256(body), "%q: the object, byte for byte", extra)
	}
	// A server error is a failure, reported.
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"get", "-o", filepath.Join(t.TempDir(), "x"), srv.URL + "/missing"},
		io.Discard, &stderr, loopManager(t, ""))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "404 Not Found")
}

// get gives its Manager a file to keep what it learns of the paths in:
// by default in the user's cache directory; -knowledge "" none.
func TestGetKeepsKnowledge(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, 1000))
	}))
	defer srv.Close()
	def, err := intents.DefaultKnowledgeFile()
	require.NoError(t, err)
	mine := filepath.Join(t.TempDir(), "k.json")
	for _, c := range []struct {
		args []string
		want string
	}{{nil, def}, {[]string{"-knowledge", ""}, ""}, {[]string{"-knowledge", mine}, mine}} {
		var got []string
		loop := loopManager(t, "")
		mf := func(cfg intents.Config) (*intents.Manager, error) {
			got = append(got, cfg.Knowledge)
			return loop(cfg)
		}
		args := append(append([]string{"get", "-o", filepath.Join(t.TempDir(), "out")}, c.args...), srv.URL+"/")
		var stderr bytes.Buffer
		require.Equal(t, 0, run(context.Background(), args, io.Discard, &stderr, mf), stderr.String())
		assert.Equal(t, []string{c.want}, got, "%q", c.args)
	}
	assert.Contains(t, def, os.Getenv("XDG_CACHE_HOME"), "the tests' own cache folder")
}

func TestResolve(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		if q.Question[0].Qtype == dns.TypeA {
			rr, _ := dns.NewRR(q.Question[0].Name + " 60 IN A 192.0.2.44")
			m.Answer = append(m.Answer, rr)
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.ActivateAndServe() }()
	<-started
	defer func() { _ = srv.Shutdown(); <-served }()

	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"resolve", "-json", "www.example.test"}, &stdout, &stderr, loopManager(t, pc.LocalAddr().String()))
	require.Equal(t, 0, code, stderr.String())
	var answers []answerJSON
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &answers), stdout.String())
	assert.Equal(t, []answerJSON{{Path: "lo", Addresses: []string{"192.0.2.44"}}}, answers)

	stdout.Reset()
	code = run(context.Background(), []string{"resolve", "www.example.test"}, &stdout, &stderr, loopManager(t, pc.LocalAddr().String()))
	require.Equal(t, 0, code, stderr.String())
	assert.Contains(t, stdout.String(), "lo    192.0.2.44")

	// No path with a DNS server: a clear failure.
	stderr.Reset()
	code = run(context.Background(), []string{"resolve", "x.test"}, io.Discard, &stderr, loopManager(t, ""))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "no up path has a DNS server")
}

// -h of a command lists its flags on stdout and succeeds; an error from
// the library is printed with one "intents:" prefix, not two.
func TestCommandHelpAndErrorText(t *testing.T) {
	for _, cmd := range []string{"paths", "resolve", "get"} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{cmd, "-h"}, &stdout, &stderr, loopManager(t, ""))
		assert.Equal(t, 0, code, "%s -h: %s", cmd, stderr.String())
		assert.Contains(t, stdout.String(), "usage of intents "+cmd)
		assert.Contains(t, stdout.String(), "  -", "%s -h lists its flags", cmd)
	}
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"get", "-intents", "prohibit=loopback", "http://127.0.0.1:9/"},
		io.Discard, &stderr, loopManager(t, ""))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "no permitted path")
	assert.NotContains(t, stderr.String(), "intents: intents:")
}
