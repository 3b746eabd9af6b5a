//go:build !linux

// Command pageload needs Linux: it builds its testbed from network
// namespaces, TUN devices and veth pairs.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "pageload needs Linux (network namespaces); run it on a Linux host as root")
	os.Exit(1)
}
