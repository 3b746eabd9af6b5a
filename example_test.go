package intents_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	"github.com/sockintents/intents"
	"github.com/sockintents/intents/mptcp"
	"github.com/sockintents/intents/policy"
)

// A zero Dialer is a net.Dialer: drop it in, then add intents and a Manager
// where you want path selection.
func ExampleDialer() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			io.WriteString(c, "hello\n")
			c.Close()
		}
	}()

	var d intents.Dialer
	ctx := intents.WithIntents(context.Background(), intents.Intents{Category: intents.CategoryQuery})
	conn, err := d.DialContext(ctx, "tcp", l.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	line, _ := io.ReadAll(conn)
	path, binding := intents.PathOf(conn)
	fmt.Printf("%s path=%v binding=%s\n", line[:5], path, binding)
	// Output: hello path=system binding=none
}

// With a Manager and a policy, each dial goes out on the path the intents
// and the policy choose; a dial that the intents permit no path for fails
// at once with a *NoPathError that says what excluded each path. Here the
// destination is this host, reached over loopback, unless loopback is
// prohibited.
func ExampleDialer_withManager() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	m, err := intents.NewManager(intents.Config{Policy: &policy.ByCategory{}, NoWatch: true})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	d := intents.Dialer{Manager: m, Timeout: 10 * time.Second}
	ctx := intents.WithIntents(context.Background(), intents.Intents{
		Category:         intents.CategoryBulk,
		SizeToBeReceived: 200 << 20,
		Types:            map[intents.InterfaceType]intents.Level{intents.TypeCellular: intents.LevelProhibit},
	})
	conn, err := d.DialContext(ctx, "tcp", l.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	conn.Close()
	fmt.Println("connected, cellular prohibited")

	// A refinement adds a restriction (it can never lift one).
	ctx = intents.WithIntents(ctx, intents.Intents{
		Types: map[intents.InterfaceType]intents.Level{intents.TypeLoopback: intents.LevelProhibit}})
	_, err = d.DialContext(ctx, "tcp", l.Addr().String())
	var npe *intents.NoPathError
	fmt.Println(errors.As(err, &npe), npe.Excluded)
	// Output:
	// connected, cellular prohibited
	// true [{loopback prohibited (prohibit=loopback)}]
}

// ListenPacket gives UDP protocols (QUIC, DNS, RTP) a socket on the path
// the intents choose, bound to its interface and address. Here the peer is
// this host, so the socket is on loopback, unless loopback is prohibited.
func ExampleDialer_ListenPacket() {
	echo, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer echo.Close()
	go func() {
		buf := make([]byte, 512)
		n, from, err := echo.ReadFrom(buf)
		if err == nil {
			echo.WriteTo(buf[:n], from)
		}
	}()
	m, err := intents.NewManager(intents.Config{NoWatch: true})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	d := intents.Dialer{Manager: m}
	ctx := intents.WithIntents(context.Background(), intents.Intents{Category: intents.CategoryStream})
	pc, err := d.ListenPacket(ctx, "udp4", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer pc.Close()
	pc.SetDeadline(time.Now().Add(5 * time.Second))
	pc.WriteTo([]byte("ping"), echo.LocalAddr())
	buf := make([]byte, 512)
	n, _, err := pc.ReadFrom(buf)
	fmt.Println(string(buf[:n]), err)

	ctx = intents.WithIntents(ctx, intents.Intents{
		Types: map[intents.InterfaceType]intents.Level{intents.TypeLoopback: intents.LevelProhibit}})
	_, err = d.ListenPacket(ctx, "udp4", "127.0.0.1:0")
	fmt.Println(errors.Is(err, intents.ErrNoPath))
	// Output:
	// ping <nil>
	// true
}

// Intents parse from, and print as, a compact text form for flags and
// environment variables.
func ExampleParseIntents() {
	in, err := intents.ParseIntents("category=bulk,recv=10MB,prefer=wifi,prohibit=cellular")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(in.Category, in.SizeToBeReceived, in.Types[intents.TypeWifi], in.Types[intents.TypeCellular])
	fmt.Println(in)

	_, err = intents.ParseIntents("category=huge")
	fmt.Println(err)
	// Output:
	// bulk 10000000 prefer prohibit
	// category=bulk,recv=10MB,prefer=wifi,prohibit=cellular
	// intents: bad value "huge" for category: want one of query, bulk, control, keepalive, stream
}

// A request's intents refine those of its context, field by field.
func ExampleWithIntents() {
	ctx := intents.WithIntents(context.Background(), intents.Intents{
		Category: intents.CategoryBulk, Cost: intents.CostOptimize,
	})
	ctx = intents.WithIntents(ctx, intents.Intents{SizeToBeReceived: 64 << 10, Category: intents.CategoryQuery})
	in, _ := intents.FromContext(ctx)
	fmt.Println(in)
	// Output: category=query,recv=64KiB,cost=optimize
}

// LookupEndpoints is the paper's augmented name resolution: endpoints
// ordered by the policy, each with the source address and binding to use,
// for applications that connect themselves.
func ExampleResolver_LookupEndpoints() {
	m, err := intents.NewManager(intents.Config{NoWatch: true})
	if err != nil {
		log.Fatal(err)
	}
	eps, err := m.Resolver().LookupEndpoints(context.Background(), "tcp", "127.0.0.1", "http")
	if err != nil {
		log.Fatal(err)
	}
	for _, ep := range eps {
		fmt.Println(ep.Remote, ep.Path) // a nil Path, "system": the OS routes (loopback needs no path choice)
		d := ep.Dialer(&net.Dialer{Timeout: time.Second})
		_ = d // d.DialContext(ctx, "tcp", ep.Remote.String()) connects as the endpoint says
	}
	// Output: 127.0.0.1:80 system
}

// Manager.Paths shows the path table, e.g. for a status page.
func ExampleManager_Paths() {
	m, err := intents.NewManager(intents.Config{NoWatch: true})
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range m.Paths() {
		if p.Type == intents.TypeLoopback {
			fmt.Println(p.Type, p.Up, p.Addrs[0])
		}
	}
	// Output: loopback true 127.0.0.1
}

// A Transport with a Manager and a policy is a drop-in
// http.RoundTripper that chooses, for each request, the path and the
// connection (reused or new) that carry it, from the intents in the
// request's context. Here the server is this host, so every request goes
// over loopback.
func ExampleTransport() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	}))
	defer srv.Close()

	m, err := intents.NewManager(intents.Config{Policy: &policy.EAF{}, NoWatch: true})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	tr := &intents.Transport{Manager: m}
	defer tr.Close()
	client := &http.Client{Transport: tr}
	for range 2 {
		ctx := intents.WithIntents(context.Background(), intents.Intents{Category: intents.CategoryQuery})
		req, err := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		if err != nil {
			log.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	var dials, reuses int64
	for _, st := range tr.Stats() { // by path name
		dials += st.Dials
		reuses += st.Reuses
	}
	fmt.Println("dials", dials, "reuses", reuses)
	// Output:
	// 200 hello
	// 200 hello
	// dials 1 reuses 1
}

// A Policy is one method: it sees the request's intents, the permitted
// paths (preferences already applied) and the pooled connections, and
// lists its choices, best first. This one reuses a free connection, else
// opens one on the permitted path with the lowest RTT estimate. A
// Manager given it decides every dial and request with it (here it is
// asked directly, about two paths it is told of).
func ExamplePolicy() {
	lowestRTT := intents.PolicyFunc(func(req *intents.Request, d *intents.Decision) {
		for i := range req.Candidates {
			if req.Candidates[i].Available > 0 {
				d.Choices = append(d.Choices, intents.Choice{Reuse: &req.Candidates[i]})
			}
		}
		paths := slices.Clone(req.Paths)
		slices.SortStableFunc(paths, func(a, b *intents.Path) int {
			return cmp.Compare(a.Estimate().RTT, b.Estimate().RTT)
		})
		for _, p := range paths {
			d.Choices = append(d.Choices, intents.Choice{Path: p})
		}
		d.Reason = "lowest RTT"
	})

	m, err := intents.NewManager(intents.Config{Policy: lowestRTT, NoWatch: true})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	wifi := &intents.Path{Name: "wlan0", Type: intents.TypeWifi, Up: true, Prior: intents.Estimate{RTT: 30 * time.Millisecond}}
	lte := &intents.Path{Name: "wwan0", Type: intents.TypeCellular, Up: true, Prior: intents.Estimate{RTT: 60 * time.Millisecond}}
	var d intents.Decision
	lowestRTT.Decide(&intents.Request{Paths: []*intents.Path{lte, wifi}}, &d)
	fmt.Println(d.Choices[0].Path, d.Choices[1].Path, d.Reason)
	// Output: wlan0 wwan0 lowest RTT
}

// Config.Paths names the interfaces to use, in order, with what discovery
// cannot know: the type of an interface with an unusual name, cost
// labels, each path's DNS servers, and priors for its RTT and capacity
// until the path is measured. (The interfaces here are examples: name
// yours.)
func ExampleConfig_paths() {
	metered := true
	m, err := intents.NewManager(intents.Config{
		Paths: []intents.PathConfig{
			{Interface: "wlan0", Type: intents.TypeWifi, DNS: []string{"192.168.1.1"}},
			{Interface: "wwan0", Type: intents.TypeCellular, Expensive: &metered,
				RTT: 60 * time.Millisecond, Bandwidth: 20e6},
		},
		Policy: &policy.EAF{},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	for _, p := range m.Paths() {
		fmt.Println(p.Name, p.Type, p.Up, p.Expensive, p.DNS)
	}
}

// A Manager can keep what it learns of each network's paths in a file, so
// that the program's next run on the same network starts from it rather
// than blind: its first page is placed knowing which path was slow.
func ExampleConfig_knowledge() {
	file, err := intents.DefaultKnowledgeFile() // in the user's cache directory
	if err != nil {
		log.Fatal(err)
	}
	m, err := intents.NewManager(intents.Config{Policy: &policy.EAF{}, Knowledge: file})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close() // saves what was learnt (it is saved every minute too)
	for _, p := range m.Paths() {
		if e := p.Estimate(); e.Remembered {
			fmt.Printf("%s: RTT %v, capacity %d bit/s, learnt %v ago\n", p.Name, e.RTT, e.Bandwidth, e.Age.Round(time.Second))
		}
	}
}

// Each path can resolve names over encrypted DNS of its own: DNS over TLS
// (RFC 7858) or over HTTPS (RFC 8484), through that path, with the
// plaintext servers never asked unless DNSPlaintextFallback. "#NAME"
// after a DoT server is the name its certificate must show; "#ADDR" after
// a DoH URL is where to connect, so reaching the resolver needs no lookup.
func ExamplePathConfig_encryptedDNS() {
	m, err := intents.NewManager(intents.Config{
		Paths: []intents.PathConfig{
			{Interface: "wlan0", DNSOverTLS: []string{"1.1.1.1#cloudflare-dns.com"}},
			{Interface: "wwan0", DNSOverHTTPS: []string{"https://dns.google/dns-query#8.8.8.8"}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	for _, p := range m.Paths() {
		addrs, err := m.Resolver().LookupPath(ctx, p, "tcp", "www.example.com")
		fmt.Println(p.Name, addrs, err)
	}
}

// Multipath TCP is an intent: MultipathAggregate dials MPTCP with its
// first subflow on the chosen path, and Config.MPTCPEndpoints (with
// CAP_NET_ADMIN) makes every path an endpoint for the others. Conn.MPTCP
// says what the connection became: mptcp.ErrFallback if the peer or a
// middlebox left it plain TCP.
func ExampleConn_MPTCP() {
	m, err := intents.NewManager(intents.Config{Policy: &policy.EAF{}, MPTCPEndpoints: true})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	if err := m.MPTCPError(); err != nil {
		log.Print("MPTCP endpoints: ", err) // still usable with the system's own
	}
	ctx := intents.WithIntents(context.Background(), intents.Intents{
		Category: intents.CategoryBulk, Multipath: intents.MultipathAggregate})
	d := intents.Dialer{Manager: m}
	conn, err := d.DialContext(ctx, "tcp", "downloads.example:443")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	info, err := conn.(*intents.Conn).MPTCP()
	if errors.Is(err, mptcp.ErrFallback) {
		fmt.Println("plain TCP: the peer does not speak MPTCP")
		return
	}
	fmt.Println("subflows besides the first:", info.Subflows, err)
}

// With Aggregate set, a large GET is fetched in byte ranges over all
// permitted paths at once (here loopback alone); the caller reads one
// ordinary response.
func ExampleTransport_aggregate() {
	object := strings.Repeat("0123456789", 300_000) // 3 MB
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`) // If-Range keeps the ranges to one version
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(object))
	}))
	defer srv.Close()

	tr := &intents.Transport{Aggregate: &intents.Aggregate{MinChunk: 256 << 10}} // add Manager: m for the paths
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		log.Fatal(err) // errors.Is(err, intents.ErrObjectChanged) if it changed meanwhile
	}
	fmt.Println(resp.StatusCode, len(body), string(body) == object)
	// Output:
	// 200 3000000 true
}

// A Pool lends out connections for request/response protocols and takes
// them back for reuse: the paper's socketconnect / socketrelease.
func ExamplePool() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	go func() { // an echo server
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()

	p := &intents.Pool{}
	defer p.Close()
	for _, msg := range []string{"ping", "pong"} {
		c, reused, err := p.Get(context.Background(), "tcp", l.Addr().String())
		if err != nil {
			log.Fatal(err)
		}
		io.WriteString(c, msg)
		buf := make([]byte, 4)
		io.ReadFull(c, buf)
		fmt.Println(string(buf), "reused:", reused)
		c.Release() // back to the pool; c.Close() would end it
	}
	// Output:
	// ping reused: false
	// pong reused: true
}

// A Manager's BindDialer gives path binding to an API that insists on a *net.Dialer
// (tls.Dialer.NetDialer, say): each socket is bound to the path the policy
// picks for the intents in the dial's context.
func ExampleManager_BindDialer() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	m, err := intents.NewManager(intents.Config{NoWatch: true})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	d := m.BindDialer(&net.Dialer{Timeout: 5 * time.Second})
	ctx := intents.WithIntents(context.Background(), intents.Intents{
		Types: map[intents.InterfaceType]intents.Level{intents.TypeCellular: intents.LevelProhibit}})
	conn, err := d.DialContext(ctx, "tcp", l.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	conn.Close()
	ctx = intents.WithIntents(ctx, intents.Intents{
		Types: map[intents.InterfaceType]intents.Level{intents.TypeLoopback: intents.LevelProhibit}})
	_, err = d.DialContext(ctx, "tcp", l.Addr().String())
	fmt.Println(errors.Is(err, intents.ErrNoPath))
	// Output: true
}

// The zero Transport can stand in for http.DefaultTransport, and so serve
// every http.Get of the program; Close ends it.
func ExampleTransport_defaultTransport() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	}))
	defer srv.Close()
	saved := http.DefaultTransport
	tr := &intents.Transport{}
	http.DefaultTransport = tr
	defer func() { http.DefaultTransport = saved; tr.Close() }()

	resp, err := http.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status, string(body))
	// Output: 200 OK hello
}

// Without size hints, the Transport predicts each GET's size from what the
// site sent before, so that the policy can place it; a decision trace says
// what was expected and where that came from.
func ExampleWithDecisionTrace() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sizes := map[string]int{"/a": 1000, "/b": 3000}
		w.Write(make([]byte, sizes[r.URL.Path]))
	}))
	defer srv.Close()
	m, err := intents.NewManager(intents.Config{Policy: &policy.EAF{}, NoWatch: true})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	tr := &intents.Transport{Manager: m}
	defer tr.Close()
	for _, path := range []string{"/a", "/b", "/a"} {
		ctx := intents.WithDecisionTrace(context.Background(), func(di intents.DecisionInfo) {
			fmt.Printf("%s: expect %d B (%q)\n", path, di.Intents.SizeToBeReceived, di.SizeSource)
		})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			log.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// Output:
	// /a: expect 0 B ("")
	// /b: expect 1000 B ("origin")
	// /a: expect 1000 B ("url")
}
