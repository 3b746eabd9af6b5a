//go:build unix

package proxy

import (
	"syscall"
	"time"
)

// cpu is the process's user and system time.
func cpu() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
