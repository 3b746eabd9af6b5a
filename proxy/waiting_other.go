//go:build !linux

package proxy

import "net"

// canTellWaiting: bytesWaiting cannot ask the socket here.
const canTellWaiting = false

// bytesWaiting reports whether c's socket holds bytes not read yet: it
// cannot tell here, so a connection is judged by its state alone.
func bytesWaiting(net.Conn) bool { return false }
