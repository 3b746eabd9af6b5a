// Package testbed builds emulated multi-access networks for tests and
// benchmarks: network namespaces joined by virtual links, and helpers to run
// code and whole test processes inside them. It needs root (CAP_SYS_ADMIN
// and CAP_NET_ADMIN) and Linux; elsewhere, and without root, tests that use
// it skip.
package testbed
