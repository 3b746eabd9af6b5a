//go:build !linux

package intents

import (
	"runtime"
	"testing"
)

func expectedBinding(*testing.T) Binding {
	if runtime.GOOS == "darwin" || runtime.GOOS == "windows" {
		return BindInterface
	}
	return BindSource
}
