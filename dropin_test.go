package intents

// Tests of the drop-in API beside net/http's and net's (#15): lifecycle,
// Clone, RegisterProtocol, the Dialer's net.Dialer methods, BindDialer,
// refinements that may not lift a prohibition, and unit errors.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func (m *Manager) subscriptions() int {
	m.subsMu.Lock()
	defer m.subsMu.Unlock()
	return len(m.subs)
}

// 50 Transports sharing a Manager: Close ends each one's subscription to
// the Manager's path changes, and so does garbage collection of one
// dropped without Close.
func TestTransportEndsItsSubscription(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	m := loManager(t, nil)
	defer m.Close()
	use := func(tr *Transport) {
		body, _ := get(t, tr, context.Background(), srv.URL)
		require.Equal(t, "ok", body)
	}
	for range 50 {
		tr := &Transport{Manager: m}
		use(tr)
		tr.Close()
	}
	assert.Zero(t, m.subscriptions(), "Close ended every subscription")
	again := &Transport{Manager: m}
	use(again) // a new Transport on the same Manager works
	again.Close()

	func() {
		for range 50 {
			tr := &Transport{Manager: m}
			use(tr)
			tr.CloseIdleConnections() // and dropped
		}
	}()
	// Cleanups run after a collection finds the Transports unreachable.
	for i := 0; i < 100 && m.subscriptions() > 1; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	assert.LessOrEqual(t, m.subscriptions(), 1, "dropped Transports were unsubscribed when collected")
}

func TestTransportCloseRefusesNewRequests(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	tr := &Transport{}
	require.NoError(t, tr.Close())
	_, err := tr.RoundTrip(must(http.NewRequest("GET", srv.URL, nil)))
	assert.ErrorIs(t, err, net.ErrClosed, "a closed Transport says so as net does")
}

func TestCloseDefaultManager(t *testing.T) {
	m1, err := DefaultManager()
	require.NoError(t, err)
	require.NoError(t, CloseDefaultManager())
	m2, err := DefaultManager()
	require.NoError(t, err)
	assert.NotSame(t, m1, m2, "a new one after Close")
	require.NoError(t, CloseDefaultManager())
	require.NoError(t, CloseDefaultManager(), "closing none is fine")
}

func TestTransportClone(t *testing.T) {
	base := &http.Transport{MaxIdleConnsPerHost: 3}
	tr := &Transport{Base: base, MaxConnsPerHost: 4, TwoStep: 8192, Aggregate: &Aggregate{MinSize: 5}}
	c := tr.Clone()
	assert.Equal(t, 4, c.MaxConnsPerHost)
	assert.Equal(t, 8192, c.TwoStep)
	assert.Equal(t, 3, c.Base.MaxIdleConnsPerHost)
	assert.NotSame(t, base, c.Base, "Base is cloned")
	assert.NotSame(t, tr.Aggregate, c.Aggregate)
	assert.EqualValues(t, 5, c.Aggregate.MinSize)
}

type fileRT struct{}

func (fileRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == "/skip" {
		return nil, http.ErrSkipAltProtocol
	}
	return &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader("file " + r.URL.Path)), Request: r}, nil
}

func TestTransportRegisterProtocol(t *testing.T) {
	tr := &Transport{}
	defer tr.Close()
	tr.RegisterProtocol("file", fileRT{})
	assert.Panics(t, func() { tr.RegisterProtocol("file", fileRT{}) }, "as net/http does")
	resp, err := tr.RoundTrip(must(http.NewRequest("GET", "file:///etc/motd", nil)))
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "file /etc/motd", string(b))
	_, err = tr.RoundTrip(must(http.NewRequest("GET", "file:///skip", nil)))
	assert.ErrorContains(t, err, "unsupported protocol scheme", "skipped: left to the Transport, which has no file scheme")
	c := tr.Clone()
	_, err = c.RoundTrip(must(http.NewRequest("GET", "file:///x", nil)))
	assert.NoError(t, err, "a clone keeps the registrations")
}

// The Dialer's net.Dialer methods behave as net.Dialer's, side by side.
func TestDialerMethodsLikeNetDialer(t *testing.T) {
	l := listen(t, "tcp", "127.0.0.1:0")
	raddr := netip.MustParseAddrPort(l.Addr().String())
	var nd net.Dialer
	var d Dialer
	ctx := context.Background()

	tc, err := d.DialTCP(ctx, "tcp", netip.AddrPort{}, raddr)
	require.NoError(t, err)
	tc.Close()
	ntc, err := nd.DialTCP(ctx, "tcp", netip.AddrPort{}, raddr)
	require.NoError(t, err)
	ntc.Close()
	tc, err = d.DialTCP(ctx, "tcp", netip.MustParseAddrPort("127.0.0.2:0"), raddr)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.2", tc.LocalAddr().(*net.TCPAddr).IP.String(), "laddr binds the source")
	tc.Close()

	// With a Manager and intents: the path's connection, unwrapped.
	dm := &Dialer{Manager: loManager(t, nil)}
	in := WithIntents(ctx, Intents{Types: map[InterfaceType]Level{TypeCellular: LevelProhibit}})
	tc, err = dm.DialTCP(in, "tcp", netip.AddrPort{}, raddr)
	require.NoError(t, err)
	tc.Close()

	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	defer pc.Close()
	uc, err := d.DialUDP(ctx, "udp", netip.AddrPort{}, netip.MustParseAddrPort(pc.LocalAddr().String()))
	require.NoError(t, err)
	_, err = uc.Write([]byte("x"))
	require.NoError(t, err)
	uc.Close()

	sock := filepath.Join(t.TempDir(), "s")
	ul, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer ul.Close()
	unixConn, err := d.DialUnix(ctx, "unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	require.NoError(t, err)
	unixConn.Close()

	d.LocalAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}
	c, err := d.DialContext(ctx, "tcp", raddr.String())
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.3", c.LocalAddr().(*net.TCPAddr).IP.String(), "LocalAddr, as in net.Dialer")
	c.Close()

	assert.False(t, d.MultipathTCP())
	d.SetMultipathTCP(true)
	assert.True(t, d.MultipathTCP())
	in2, _ := FromContext(d.withMPTCPDefault(ctx))
	assert.Equal(t, MultipathHandover, in2.Multipath, "on where the intents do not say")
	in3, _ := FromContext(d.withMPTCPDefault(WithIntents(ctx, Intents{Multipath: MultipathOff})))
	assert.Equal(t, MultipathOff, in3.Multipath, "the intents win")
	d.SetMultipathTCP(false)
	assert.False(t, d.MultipathTCP())
}

// Manager.BindDialer decorates a *net.Dialer: the policy's path binds each socket,
// the caller's Control still runs, and a prohibited destination fails.
func TestBindDialer(t *testing.T) {
	l := listen(t, "tcp", "127.0.0.1:0")
	m := loManager(t, nil)
	var controlled bool
	d := m.BindDialer(&net.Dialer{Control: func(string, string, syscall.RawConn) error { controlled = true; return nil }})
	c, err := d.DialContext(context.Background(), "tcp", l.Addr().String())
	require.NoError(t, err)
	c.Close()
	assert.True(t, controlled, "the caller's Control ran")
	ctx := WithIntents(context.Background(), Intents{Types: map[InterfaceType]Level{TypeLoopback: LevelProhibit}})
	_, err = d.DialContext(ctx, "tcp", l.Addr().String())
	assert.ErrorIs(t, err, ErrNoPath)
}

func TestRefinementNeverLiftsAProhibition(t *testing.T) {
	ctx := WithIntents(context.Background(), Intents{Types: map[InterfaceType]Level{TypeCellular: LevelProhibit},
		Interfaces: map[string]Level{"wwan0": LevelProhibit}})
	ctx = WithIntents(ctx, Intents{Types: map[InterfaceType]Level{TypeCellular: LevelPrefer, TypeWifi: LevelAvoid},
		Interfaces: map[string]Level{"wwan0": LevelNone}})
	in, _ := FromContext(ctx)
	assert.Equal(t, LevelProhibit, in.Types[TypeCellular])
	assert.Equal(t, LevelAvoid, in.Types[TypeWifi])
	assert.Equal(t, LevelProhibit, in.Interfaces["wwan0"])
}

func TestParseIntentsUnitCase(t *testing.T) {
	_, err := ParseIntents("recv=10mb")
	assert.ErrorContains(t, err, `did you mean "MB"`)
	_, err = ParseIntents("bitrate=5mbps")
	assert.ErrorContains(t, err, `did you mean "Mbps"`)
	_, err = ParseIntents("recv=10furlongs")
	assert.ErrorContains(t, err, "unknown unit")
	in, err := ParseIntents("recv=10MB")
	require.NoError(t, err)
	assert.EqualValues(t, 10e6, in.SizeToBeReceived)
}

// unprocessed's text rules; net/http's nothingWrittenError, known by its
// type name, and the GOAWAY case against a real server are covered by
// TestNetnsNginx.
func TestUnprocessedClassification(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{errors.New("http2: Transport received Server's graceful shutdown GOAWAY"), true},
		{errors.New("http2: client conn not usable"), true},
		{errors.New("http2: client conn could not be established"), true},
		{errors.New("stream error: stream ID 7; REFUSED_STREAM"), true},
		{fmt.Errorf("wrapped: %w", errors.New("http2: client conn not usable")), true},
		{fmt.Errorf("%w: %w", ErrUnprocessed, errors.New("http3: conn unusable: GOAWAY")), true}, // an HTTP/3 connection's
		{errors.New("stream error: stream ID 7; PROTOCOL_ERROR"), false},
		{errors.New("http2: Transport received GOAWAY from server ErrCode:PROTOCOL_ERROR"), false},
		{io.ErrUnexpectedEOF, false},
		{context.Canceled, false},
	} {
		assert.Equal(t, tc.want, unprocessed(tc.err), "%v", tc.err)
		// Given back to the caller, such an error matches ErrUnprocessed,
		// with its own text.
		marked := markUnprocessed(tc.err)
		assert.Equal(t, tc.want, errors.Is(marked, ErrUnprocessed), "%v", tc.err)
		assert.ErrorIs(t, marked, tc.err)
		assert.Equal(t, tc.err.Error(), marked.Error())
	}
}
