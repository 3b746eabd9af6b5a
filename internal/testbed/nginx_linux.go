package testbed

import (
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// nginxConf is nginx's configuration: %[1]s its folder, %[2]s and %[3]s its
// plain and TLS addresses (host:port).
const nginxConf = `
user root;
worker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 256; }
http {
	log_format reqlog '$remote_addr $server_addr $connection $connection_requests $server_protocol $status $request_uri';
	access_log %[1]s/access.log reqlog;
	client_body_temp_path %[1]s/tmp;
	proxy_temp_path %[1]s/tmp;
	fastcgi_temp_path %[1]s/tmp;
	uwsgi_temp_path %[1]s/tmp;
	scgi_temp_path %[1]s/tmp;
	keepalive_requests 5;
	keepalive_timeout 1s;
	default_type application/octet-stream;
	sendfile on;
	server {
		listen %[2]s;
		listen %[3]s ssl http2;
		ssl_certificate %[1]s/server.pem;
		ssl_certificate_key %[1]s/server.key;
		root %[1]s/www;
	}
}
`

// StartNginx starts nginx inside tb's server namespace, serving the files
// in dir/www on host, port 80 (HTTP/1.1) and 443 (HTTP/1.1 and HTTP/2 over
// TLS): see RunNginx.
func StartNginx(t testing.TB, tb *Testbed, dir string, host netip.Addr, ca *CA) {
	t.Helper()
	RunNginx(t, tb.Server, dir, net.JoinHostPort(host.String(), "80"), net.JoinHostPort(host.String(), "443"), ca)
}

// RunNginx starts nginx inside n (nil: this process's namespace), serving
// the files in dir/www on plain (HTTP/1.1) and secure (HTTP/1.1 and HTTP/2
// over TLS, with a certificate of ca, whose certificate it writes to
// dir/ca.pem), both host:port, with sendfile. Its access log,
// dir/access.log, has a line a request: client address, server address,
// connection, the connection's request count, protocol, status, URI.
// keepalive_requests 5, keepalive_timeout 1s. It runs under wrap, if
// given (taskset -c 0, say). It stops, gracefully (the log finished), when
// t ends. Needs nginx (an installed binary; its service is not used).
func RunNginx(t testing.TB, n *Netns, dir, plain, secure string, ca *CA, wrap ...string) {
	t.Helper()
	chain, key, err := ca.ServerPEM()
	require.NoError(t, err)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Certificate[len(ca.Cert.Certificate)-1]})
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "www"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "tmp"), 0o755))
	for name, b := range map[string][]byte{"server.pem": chain, "server.key": key,
		"ca.pem": caPEM, "nginx.conf": fmt.Appendf(nil, nginxConf, dir, plain, secure)} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}
	bin := "nginx"
	if _, err := exec.LookPath(bin); err != nil {
		bin = "/usr/sbin/nginx" // root's PATH may lack sbin
	}
	args := append(wrap, bin, "-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", filepath.Join(dir, "nginx.conf"))
	if n != nil {
		args = append([]string{"ip", "netns", "exec", n.Name}, args...)
	}
	StartDaemon(t, exec.Command(args[0], args[1:]...), func() error {
		dial := func() error {
			c, err := net.DialTimeout("tcp", plain, time.Second)
			if err == nil {
				c.Close()
			}
			return err
		}
		if n == nil {
			return dial()
		}
		return n.Do(dial) // seen from its namespace
	}, syscall.SIGQUIT)
}
