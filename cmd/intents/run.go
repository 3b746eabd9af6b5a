package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/proxy"
)

// exitStatus is a program's exit status, for `run` to exit with.
type exitStatus struct{ code int }

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// proxyVars are the environment variables that tell programs their proxy,
// in both cases: curl reads http_proxy only in lower case, others read
// upper case.
var proxyVars = []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"}

// cmdRun runs a program with the proxy environment variables set: to a
// proxy of its own, which serves only it, or to the one -proxy names.
// With -transparent (Linux, root) the program's TCP connections go to
// the proxy whatever it does with those variables. It ends with the
// program, and with its exit status.
func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer, mf managerFunc) error {
	fs := newFlags("run")
	via := fs.String("proxy", "", "use the proxy at `URL` (http://HOST:PORT) instead of one of its own")
	text := fs.String("intents", "", "the intents of all the program sends, as `TEXT` (with a proxy of its own)")
	transparent := fs.Bool("transparent", false, "redirect all the program's TCP connections to its proxy, for programs that ignore proxy settings (Linux, root: cgroups, nftables)")
	sf := addServerFlags(fs, false)
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageError{"run needs a program to run"}
	}
	in, err := intents.ParseIntents(*text)
	if err != nil {
		return usageError{"-intents: " + err.Error()}
	}
	if *via != "" {
		if *text != "" || *transparent {
			return usageError{"-intents and -transparent are for a proxy of its own, not -proxy's"}
		}
		u, err := url.Parse(*via)
		if err != nil || u.Scheme != "http" || u.Host == "" {
			return usageError{fmt.Sprintf("-proxy %q: want http://HOST:PORT", *via)}
		}
		return runProgram(ctx, fs.Args(), proxyEnv(os.Environ(), *via, *via, false), nil, stdout, stderr)
	}
	s, closeServer, err := sf.server(stderr, mf)
	if err != nil {
		return err
	}
	defer closeServer()
	// It serves this program alone, which could reach the same without it,
	// and asks for credentials that only the program is told: another
	// user's programs on the host may reach its listeners, not use them.
	s.AllowLocal, s.AnyPort = true, true
	s.User, s.Password = secret(), secret()
	cred := url.UserPassword(s.User, s.Password)
	g := newServing(ctx, s)
	httpAt, err := g.listen("127.0.0.1:0", func(l net.Listener) error { return s.Serve(l, in) })
	if err != nil {
		return g.close(err)
	}
	socksAt, err := g.listen("127.0.0.1:0", func(l net.Listener) error { return s.ServeSOCKS(l, in) })
	if err != nil {
		return g.close(err)
	}
	env := proxyEnv(os.Environ(), (&url.URL{Scheme: "http", User: cred, Host: httpAt.String()}).String(),
		(&url.URL{Scheme: "socks5h", User: cred, Host: socksAt.String()}).String(), true)
	var r *redirection
	if *transparent {
		if r, err = redirectTo(g, s, in); err != nil {
			return g.close(err)
		}
		defer r.close()
	}
	return g.close(runProgram(ctx, fs.Args(), env, r, stdout, stderr))
}

// Privileged ports the transparent listeners take, from the first down:
// only root binds one, so if intents is killed and its rules outlive it,
// no other user's program can take the port they send connections to.
const (
	privilegedFirst = 1023
	privilegedLast  = 600
)

// listenPrivileged has g serve f on host at the first free port of the
// privileged ones (see privilegedFirst).
func listenPrivileged(g *serving, host string, f func(net.Listener) error) (net.Addr, error) {
	var err error
	for port := privilegedFirst; port >= privilegedLast; port-- {
		var a net.Addr
		if a, err = g.listen(net.JoinHostPort(host, strconv.Itoa(port)), f); err == nil {
			return a, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	return nil, fmt.Errorf("a privileged port for the transparent listener on %s: %w", host, err)
}

// secret is 128 random bits in hex, a credential of the run's proxy.
func secret() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// redirectTo serves transparent listeners on loopback (IPv4, and IPv6
// where the host has it) and redirects a cgroup's connections to them.
func redirectTo(g *serving, s *proxy.Server, in intents.Intents) (*redirection, error) {
	var at [2]netip.AddrPort
	for i, host := range []string{"127.0.0.1", "::1"} {
		a, err := listenPrivileged(g, host, func(l net.Listener) error { return s.ServeTransparent(l, in) })
		if err != nil {
			if i == 0 {
				return nil, err
			}
			continue // no IPv6 loopback: IPv6 goes direct
		}
		at[i], _ = netip.ParseAddrPort(a.String())
	}
	return redirect(at[0], at[1])
}

// proxyEnv is env with the proxy variables set: plain HTTP and HTTPS
// (CONNECT) to httpURL, anything else to allURL; with local, this host's
// own addresses bypass the proxy (which would refuse them), added to any
// NO_PROXY env has.
func proxyEnv(env []string, httpURL, allURL string, local bool) []string {
	var noProxy []string
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, v, _ := strings.Cut(kv, "=")
		if strings.EqualFold(k, "NO_PROXY") && v != "" && !slices.Contains(noProxy, v) {
			noProxy = append(noProxy, v)
		}
		return slices.Contains(proxyVars, k)
	})
	if local {
		noProxy = append(noProxy, "localhost,127.0.0.0/8,::1")
		noProxy = append(noProxy, hostAddrs()...)
	}
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"} {
		env = append(env, k+"="+httpURL)
	}
	env = append(env, "ALL_PROXY="+allURL, "all_proxy="+allURL)
	if len(noProxy) > 0 {
		np := strings.Join(noProxy, ",")
		env = append(env, "NO_PROXY="+np, "no_proxy="+np)
	}
	return env
}

// hostAddrs are this host's own addresses, but loopback and link-local
// ones (which need no proxy either, and name no host beyond the link).
func hostAddrs() []string {
	ifas, _ := net.InterfaceAddrs()
	var out []string
	for _, ifa := range ifas {
		p, err := netip.ParsePrefix(ifa.String())
		if a := p.Addr().Unmap(); err == nil && !a.IsLoopback() && !a.IsLinkLocalUnicast() && !slices.Contains(out, a.String()) {
			out = append(out, a.String())
		}
	}
	return out
}

// runProgram runs args with env (in r's cgroup, if set), its output to
// stdout and stderr, its input the command's; ctx ending interrupts it
// (and kills it 5 s later).
func runProgram(ctx context.Context, args, env []string, r *redirection, stdout, stderr io.Writer) error {
	// The thread that starts the program lives until it ends: a program
	// told to die with its supervisor (Linux's parent-death signal, see
	// redirection.prepare) dies with the thread that started it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = env, os.Stdin, stdout, stderr
	if r != nil {
		r.prepare(cmd)
	}
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() >= 0 {
		return exitStatus{ee.ExitCode()}
	}
	return err
}
