// Command dial is a custom TCP client that says what its connection is for:
// it dials ADDRESS with the intents of -intents, prints the path and local
// address the connection got, sends stdin and copies the reply to stdout.
//
//	echo hello | go run ./examples/dial -intents 'category=query,prefer=wired' localhost:7
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"time"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/policy"
)

func main() {
	text := flag.String("intents", "", "intents in text form, e.g. category=query,prefer=wifi")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: dial [-intents TEXT] HOST:PORT")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	in, err := intents.ParseIntents(*text)
	if err != nil {
		log.Fatal(err)
	}
	m, err := intents.NewManager(intents.Config{Policy: &policy.ByCategory{}})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	d := intents.Dialer{Manager: m, Timeout: 10 * time.Second}
	ctx := intents.WithIntents(context.Background(), in)
	conn, err := d.DialContext(ctx, "tcp", flag.Arg(0))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	p, binding := intents.PathOf(conn)
	log.Printf("connected %s -> %s on path %v (binding: %s)", conn.LocalAddr(), conn.RemoteAddr(), p, binding)
	go func() {
		io.Copy(conn, os.Stdin)
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	}()
	if _, err := io.Copy(os.Stdout, conn); err != nil && err != net.ErrClosed {
		log.Fatal(err)
	}
}
