package intents

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestIntentsDSCP(t *testing.T) {
	for text, want := range map[string]int{
		"":                                     dscpDefault,
		"category=bulk":                        dscpDefault,
		"timeliness=background":                dscpLE,
		"category=stream":                      dscpAF41,
		"timeliness=interactive":               dscpAF21,
		"category=query":                       dscpAF21,
		"category=query,timeliness=background": dscpLE,
	} {
		in, err := ParseIntents(text)
		require.NoError(t, err)
		assert.Equal(t, want, in.DSCP(), text)
	}
}

func TestDialerMarksDSCP(t *testing.T) {
	l := listen(t, "tcp", "127.0.0.1:0")
	tos := func(d *Dialer, ctx context.Context) int {
		c, err := d.DialContext(ctx, "tcp", l.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		rc, err := c.(*net.TCPConn).SyscallConn()
		require.NoError(t, err)
		var v int
		require.NoError(t, rc.Control(func(fd uintptr) { v, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TOS) }))
		require.NoError(t, err)
		return v
	}
	background := WithIntents(context.Background(), Intents{Timeliness: TimelinessBackground})
	assert.Equal(t, dscpLE<<2, tos(&Dialer{MarkDSCP: true}, background), "Lower Effort")
	assert.Equal(t, dscpAF21<<2, tos(&Dialer{MarkDSCP: true}, WithIntents(context.Background(), Intents{Category: CategoryQuery})))
	assert.Equal(t, 0, tos(&Dialer{}, background), "off by default")
}
