package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/sockintents/intents/proxy"
)

// defaultCertDir is where the proxy keeps its own certificates: the
// user's configuration directory ("" where there is none).
func defaultCertDir() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "intents")
}

// proxyTLS is the HTTPS listeners' configuration: the certificate of
// certFile and keyFile, or, with neither, the proxy's own, kept in dir
// (see proxy.LoadOwnCertificate) for the hosts the listeners are reached
// at. own is nil for a certificate given.
func proxyTLS(certFile, keyFile, dir string, listeners listenFlag) (conf *tls.Config, own *proxy.OwnCertificate, err error) {
	if certFile != "" || keyFile != "" {
		if certFile == "" || keyFile == "" {
			return nil, nil, usageError{"-cert and -key go together"}
		}
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, nil, err
		}
		return &tls.Config{Certificates: []tls.Certificate{cert}}, nil, nil
	}
	if dir == "" {
		return nil, nil, usageError{"-tls-listen needs -cert and -key, or -cert-dir for a certificate of its own"}
	}
	var hosts []string
	for _, l := range listeners {
		hosts = append(hosts, listenHosts(l.addr)...)
	}
	own, err = proxy.LoadOwnCertificate(dir, hosts)
	if err != nil {
		return nil, nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{own.Certificate}}, own, nil
}

// listenHosts are the names and addresses a listener on addr is reached
// at: its host, or for an unspecified one, this host's loopback, name
// and interfaces' addresses.
func listenHosts(addr string) []string {
	host, _, _ := net.SplitHostPort(addr)
	if a, err := netip.ParseAddr(host); err != nil || !a.IsUnspecified() {
		if host == "localhost" || err == nil && a.IsLoopback() {
			return []string{host, "localhost", "127.0.0.1", "::1"}
		}
		return []string{host}
	}
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if name, err := os.Hostname(); err == nil {
		hosts = append(hosts, name)
	}
	ifas, _ := net.InterfaceAddrs()
	for _, ifa := range ifas {
		if p, err := netip.ParsePrefix(ifa.String()); err == nil && !p.Addr().IsLinkLocalUnicast() {
			hosts = append(hosts, p.Addr().String())
		}
	}
	return hosts
}

// printBrowserSetup tells, for an HTTPS listener at addr with the
// proxy's own certificate, how to start Chromium through it and how to
// set Firefox up. profile is the Chromium profile to use: Chromium takes
// a certificate by its key only with a profile of its own.
func printBrowserSetup(w io.Writer, addr string, own *proxy.OwnCertificate, profile string) {
	addr = reachable(addr)
	fmt.Fprintf(w, `
A browser through this proxy (HTTP/2 to it, so it sees a page's requests at once):

  chromium --user-data-dir=%s \
    --proxy-server=https://%s --proxy-bypass-list='<-loopback>' \
    --ignore-certificate-errors-spki-list=%s

  ('<-loopback>' sends this host's own sites through the proxy too;
  Chromium bypasses them otherwise.)

  Firefox: import %s as an authority that identifies websites
  (Settings, Privacy & Security, Certificates, View Certificates,
  Authorities, Import), then Settings, Network Settings, Automatic proxy
  configuration URL: https://%s%s

`, shellQuote(profile), addr, own.SPKI, own.CAFile, addr, proxy.PACPath)
}

// reachable is addr as a browser on this host reaches it: an unspecified
// host is loopback.
func reachable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if a, err := netip.ParseAddr(host); err == nil && a.IsUnspecified() {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// shellQuote quotes s for a POSIX shell where it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-=:,+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
