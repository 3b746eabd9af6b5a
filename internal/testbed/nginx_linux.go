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

// nginxConf is nginx's configuration: %[1]s its folder, %[2]s its address.
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
	server {
		listen %[2]s:80;
		listen %[2]s:443 ssl http2;
		ssl_certificate %[1]s/server.pem;
		ssl_certificate_key %[1]s/server.key;
		root %[1]s/www;
	}
}
`

// StartNginx starts nginx inside tb's server namespace, serving the files
// in dir/www on host, port 80 (HTTP/1.1) and 443 (HTTP/1.1 and HTTP/2 over
// TLS, with a certificate of ca, whose certificate it writes to
// dir/ca.pem). Its access log, dir/access.log, has a line a request:
// client address, server address, connection, the connection's request
// count, protocol, status, URI. keepalive_requests 5, keepalive_timeout
// 1s. It stops when t ends. Needs nginx (an installed binary; its service
// is not used).
func StartNginx(t testing.TB, tb *Testbed, dir string, host netip.Addr, ca *CA) {
	t.Helper()
	chain, key, err := ca.ServerPEM()
	require.NoError(t, err)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Certificate[len(ca.Cert.Certificate)-1]})
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "www"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "tmp"), 0o755))
	for name, b := range map[string][]byte{"server.pem": chain, "server.key": key,
		"ca.pem": caPEM, "nginx.conf": fmt.Appendf(nil, nginxConf, dir, host)} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}
	cmd := exec.Command("ip", "netns", "exec", tb.Server.Name, "nginx", "-p", dir, "-e", filepath.Join(dir, "error.log"),
		"-c", filepath.Join(dir, "nginx.conf"))
	out, err := os.Create(filepath.Join(dir, "nginx.out"))
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGQUIT) // graceful: finishes the log
		<-exited
		out.Close()
	})
	// Ready when its port accepts, seen from the server namespace.
	for attempt := 0; ; attempt++ {
		var c net.Conn
		err := tb.Server.Do(func() error {
			var err error
			c, err = net.DialTimeout("tcp", net.JoinHostPort(host.String(), "80"), time.Second)
			return err
		})
		if err == nil {
			c.Close()
			return
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "nginx.out"))
			elog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited: %v\n%s\n%s", err, log, elog)
		case <-time.After(time.Duration(attempt+1) * 20 * time.Millisecond):
		}
		require.Less(t, attempt, 50, "nginx does not accept connections: %v", err)
	}
}
