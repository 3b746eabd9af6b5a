//go:build linux

package main

import (
	"context"
	"net"
	"net/http/httptrace"
)

// withGotConn records the connection a request went out on.
func withGotConn(ctx context.Context, conn *net.Conn) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { *conn = i.Conn },
	})
}
