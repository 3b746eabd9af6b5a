package intents

import (
	"context"
	"crypto/sha256"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sockintents/intents/internal/tcpinfo"
	"github.com/sockintents/intents/internal/testbed"
)

// A body whose bytes have all arrived, waiting in the socket for a late
// reader, is not moved: only what has not arrived is weighed, and here
// nothing has (the policy would move anything it is asked about).
func TestMoveWeighsOnlyWhatHasNotArrived(t *testing.T) {
	checkEveryRead(t)
	const size = 48 << 10 // beyond moveMinBytes once the headers' read took some; within loopback's first window
	var log requestLog
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(r)
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "", time.Time{}, testbed.NewObject(size))
	}))
	defer srv.Close()
	tr, mover, base := movePaths(t, srv)
	conns := make(chan net.Conn, 1)
	dial := tr.Base.DialContext
	tr.Base.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err == nil {
			conns <- c
		}
		return c, err
	}

	ctx := WithIntents(context.Background(), Intents{SizeToBeReceived: size}) // as predicted: no move at the headers
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/obj", nil)
	require.NoError(t, err)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	rc, err := (<-conns).(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	// The headers' read took at most a buffer's worth of the body; the
	// rest is in once the socket holds it (loopback delivers at once, but
	// not synchronously).
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := tcpinfo.Get(rc)
		require.NoError(t, err)
		if info.Unread >= size-4096 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the body never arrived whole: %d bytes in the socket", info.Unread)
		runtime.Gosched()
	}
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, testbed.ObjectSum(size), sha256.Sum256(body))
	assert.Equal(t, []string{"/obj  "}, log.all(), "one request: nothing moved")
	assert.Empty(t, mover.moves(), "nothing left to come: the policy is not asked")
	assert.Zero(t, tr.Stats()["p1"].Moved)
	assert.Equal(t, strconv.Itoa(size), resp.Header.Get("Content-Length"))
}
