package intents

import (
	"errors"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// expectedBinding is what this kernel and process allow: SO_BINDTODEVICE
// needs CAP_NET_RAW before Linux 5.7.
func expectedBinding(t *testing.T) Binding {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.BindToDevice(fd, loopbackName(t)); errors.Is(err, syscall.EPERM) {
		return BindSource
	}
	return BindInterface
}
