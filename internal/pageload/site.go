package pageload

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Site serves workloads as real web pages, for a browser to load: page
// p's object i is at /site/p/i on its host, the root an HTML document
// whose tags (<img>, <script async>, <link rel=stylesheet>) reference the
// objects that wait for the root alone, so the browser finds them as it
// parses. An object that waits for another is requested by a script: its
// parent, the latest object it waits for, which on running waits for the
// object's other dependencies (by their load events) and then adds it to
// the page. So the browser loads the workload's own dependency graph,
// the one a Loader replays; a parent is served as a script whatever its
// type (only a script can request something on a condition), and an
// object of another type as an image. Bodies are of the objects' sizes,
// unless a root or parent needs more for its tags (see Size); images are
// valid PNGs (a browser stops downloading one it cannot decode).
//
// A query parameter load=TAG on the root is carried to every object's
// URL, so a server's log tells which load each request belongs to.
type Site struct {
	Pages []Workload
	// Host returns the address of server number host (an Object's
	// Host), with a port if not the scheme's.
	Host func(host int) string
}

// SitePrefix is the path under which a Site serves its pages.
const SitePrefix = "/site/"

// URL is object i of page p over scheme ("http" or "https"), with the
// load's tag.
func (s *Site) URL(scheme string, p, i int, tag string) string {
	u := fmt.Sprintf("%s://%s%s%d/%d", scheme, s.Host(s.Pages[p].Objects[i].Host), SitePrefix, p, i)
	if tag != "" {
		u += "?load=" + url.QueryEscape(tag)
	}
	return u
}

// ServeHTTP serves /site/P/I.
func (s *Site) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, ok := strings.CutPrefix(r.URL.Path, SitePrefix)
	ps, is, ok2 := strings.Cut(rest, "/")
	p, err1 := strconv.Atoi(ps)
	i, err2 := strconv.Atoi(is)
	if !ok || !ok2 || err1 != nil || err2 != nil || p < 0 || p >= len(s.Pages) || i < 0 || i >= len(s.Pages[p].Objects) {
		http.NotFound(w, r)
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	body, typ := s.body(scheme, p, i, r.URL.Query().Get("load"))
	w.Header().Set("Content-Type", contentType[typ])
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	// Every load is a first visit.
	w.Header().Set("Cache-Control", "no-store")
	// The page may read every object's timing and size (Resource
	// Timing), whatever its host.
	w.Header().Set("Timing-Allow-Origin", "*")
	if r.Method != http.MethodHead {
		io.WriteString(w, body)
	}
}

// Size is the body size of page p's object i over scheme, for a load
// tagged tag: the object's size, or more where its tags need more.
func (s *Site) Size(scheme string, p, i int, tag string) int {
	if o := s.Pages[p].Objects[i]; i > 0 && !slices.ContainsFunc(s.Pages[p].Objects[i+1:], func(c Object) bool { return parentOf(c) == i }) {
		return int(max(o.Size, 0)) // a leaf: its body is its size, whatever its type
	}
	body, _ := s.body(scheme, p, i, tag)
	return len(body)
}

// typeDocument is the root's type, served as HTML.
const typeDocument Type = "document"

var contentType = map[Type]string{
	typeDocument:   "text/html; charset=utf-8",
	TypeScript:     "text/javascript",
	TypeStylesheet: "text/css",
	TypeImage:      "image/png",
	TypeOther:      "application/octet-stream",
}

// children are, by object, the objects whose parent it is (see Site).
func children(w Workload) [][]int {
	kids := make([][]int, len(w.Objects))
	for j := 1; j < len(w.Objects); j++ {
		p := parentOf(w.Objects[j])
		kids[p] = append(kids[p], j)
	}
	return kids
}

// parentOf is the object that requests o: the latest it waits for, or
// the root.
func parentOf(o Object) int {
	if len(o.Deps) == 0 {
		return 0
	}
	return slices.Max(o.Deps)
}

// pageScript keeps, in the root, which objects have loaded, runs what
// waits for them, and adds an object to the page as its type asks. It
// lets Resource Timing keep every object's entry (250 by default).
const pageScript = `<script>
performance.setResourceTimingBufferSize(100000);
var pl={done:{0:true},waits:[],
mark:function(i){pl.done[i]=true;var ws=pl.waits;pl.waits=[];
ws.forEach(function(w){if(w.deps.every(function(d){return pl.done[d]}))w.f();else pl.waits.push(w)})},
after:function(deps,f){pl.waits.push({deps:deps,f:f});pl.mark(0)},
add:function(i,t,u){var e;
if(t=="script"){e=document.createElement("script");e.async=true;e.src=u}
else if(t=="stylesheet"){e=document.createElement("link");e.rel="stylesheet";e.href=u}
else{e=document.createElement("img");e.src=u}
e.onload=e.onerror=function(){pl.mark(i)};(document.body||document.documentElement).appendChild(e)}};
</script>
`

// body renders page p's object i, and the type it is served as.
func (s *Site) body(scheme string, p, i int, tag string) (string, Type) {
	w := s.Pages[p]
	kids := children(w)
	o := w.Objects[i]
	var b strings.Builder
	switch {
	case i == 0:
		fmt.Fprintf(&b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>%d</title>\n%s</head><body>\n", p, pageScript)
		for _, j := range kids[0] {
			u := s.URL(scheme, p, j, tag)
			mark := fmt.Sprintf(`onload="pl.mark(%d)" onerror="pl.mark(%d)"`, j, j)
			switch servedAs(w, kids, j) {
			case TypeScript:
				fmt.Fprintf(&b, "<script async src=\"%s\" %s></script>\n", u, mark)
			case TypeStylesheet:
				fmt.Fprintf(&b, "<link rel=\"stylesheet\" href=\"%s\" %s>\n", u, mark)
			default:
				fmt.Fprintf(&b, "<img src=\"%s\" alt=\"\" %s>\n", u, mark)
			}
		}
		const end = "</body></html>\n"
		pad(&b, o.Size-int64(len(end)), "<!--", "-->\n")
		b.WriteString(end)
		return b.String(), typeDocument
	case len(kids[i]) > 0:
		for _, j := range kids[i] {
			var others []string
			for _, d := range w.Objects[j].Deps {
				if d != i {
					others = append(others, strconv.Itoa(d))
				}
			}
			fmt.Fprintf(&b, "pl.after([%s],function(){pl.add(%d,%q,%q)});\n", strings.Join(others, ","), j, servedAs(w, kids, j), s.URL(scheme, p, j, tag))
		}
		pad(&b, o.Size, "/*", "*/\n")
		return b.String(), TypeScript
	}
	switch o.Type {
	case TypeScript, TypeStylesheet:
		pad(&b, o.Size, "/*", "*/\n")
		return b.String(), o.Type
	}
	return imageOf(o.Size), TypeImage
}

// smallPNG is a 1×1 PNG, to which imageOf adds a text chunk.
var smallPNG = func() []byte {
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, 1, 1))); err != nil {
		panic(err)
	}
	return b.Bytes()
}()

// imageOf is a PNG image of size bytes: a 1×1 picture whose tEXt chunk
// fills the rest. A browser downloads an image it can decode to the end,
// but stops one it cannot (bytes that are no image would end a load
// early, and with it the object's bytes). Sizes below the smallest such
// PNG are that many bytes of no image.
func imageOf(size int64) string {
	const (
		iend    = 12 // the IEND chunk, last
		chunk   = 12 // a chunk's length, type and CRC
		keyword = "Comment\x00"
	)
	room := size - int64(len(smallPNG)+chunk+len(keyword))
	if room < 0 {
		return strings.Repeat("x", int(size))
	}
	data := keyword + strings.Repeat("intents ", int(room/8+1))[:room]
	var b bytes.Buffer
	b.Write(smallPNG[:len(smallPNG)-iend])
	b.Write(binary.BigEndian.AppendUint32(nil, uint32(len(data))))
	crc := crc32.NewIEEE()
	io.WriteString(crc, "tEXt")
	io.WriteString(crc, data)
	b.WriteString("tEXt")
	b.WriteString(data)
	b.Write(crc.Sum(nil))
	b.Write(smallPNG[len(smallPNG)-iend:])
	return b.String()
}

// servedAs is the type object j is served as: a parent is a script.
func servedAs(w Workload, kids [][]int, j int) Type {
	if len(kids[j]) > 0 {
		return TypeScript
	}
	return w.Objects[j].Type
}

// pad fills b up to size bytes with a comment between open and close,
// or with spaces where a comment does not fit.
func pad(b *strings.Builder, size int64, open, close string) {
	room := size - int64(b.Len()) - int64(len(open)+len(close))
	if room < 0 {
		b.WriteString(strings.Repeat(" ", int(max(size-int64(b.Len()), 0))))
		return
	}
	b.WriteString(open)
	const filler = "intents "
	for room > 0 {
		n := min(room, int64(len(filler)))
		b.WriteString(filler[:n])
		room -= n
	}
	b.WriteString(close)
}
