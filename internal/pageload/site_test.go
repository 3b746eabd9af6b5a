package pageload

import (
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func testSite(t *testing.T) *Site {
	t.Helper()
	s := &Site{Host: func(h int) string { return fmt.Sprintf("10.0.0.%d", h+1) }}
	for _, spec := range []string{"32x100KB", "mixed2", "testdata/blog.har", "testdata/news.har", "testdata/search.har"} {
		w, err := Parse(spec, 2)
		require.NoError(t, err)
		s.Pages = append(s.Pages, w)
	}
	return s
}

func get(t *testing.T, h http.Handler, target string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec
}

var siteRef = regexp.MustCompile(`(https?)://([0-9.]+)/site/(\d+)/(\d+)\?load=([^"]*)`)

// TestSitePagesReferenceEveryObjectOnce renders every object of every
// page and reads the references in them: each object but the root is
// referenced once, on its own host, with the load's tag, by its parent
// (the latest object it waits for); a parent's script waits for the
// object's other dependencies first. Bodies have the objects' sizes.
func TestSitePagesReferenceEveryObjectOnce(t *testing.T) {
	s := testSite(t)
	for p, w := range s.Pages {
		t.Run(w.Name, func(t *testing.T) {
			referencedBy := map[int]int{}
			for i, o := range w.Objects {
				rec := get(t, s, fmt.Sprintf("http://10.0.0.%d/site/%d/%d?load=a%%2Fb", o.Host+1, p, i))
				require.Equal(t, http.StatusOK, rec.Code)
				body := rec.Body.String()
				assert.Equal(t, strconv.Itoa(len(body)), rec.Header().Get("Content-Length"))
				if want := int(o.Size); len(body) != want {
					assert.Greater(t, len(body), want, "object %d: a body differs from its size only where its tags need more", i)
				}
				assert.Equal(t, len(body), s.Size("http", p, i, "a/b"))
				for _, m := range siteRef.FindAllStringSubmatch(body, -1) {
					pp, _ := strconv.Atoi(m[3])
					j, _ := strconv.Atoi(m[4])
					require.Equal(t, p, pp)
					assert.Equal(t, "http", m[1], "the scheme of the request")
					assert.Equal(t, fmt.Sprintf("10.0.0.%d", w.Objects[j].Host+1), m[2], "object %d's host", j)
					assert.Equal(t, "a%2Fb", m[5], "the load's tag, carried on")
					_, twice := referencedBy[j]
					assert.False(t, twice, "object %d referenced twice", j)
					referencedBy[j] = i
				}
			}
			for j := 1; j < len(w.Objects); j++ {
				parent := 0
				for _, d := range w.Objects[j].Deps {
					parent = max(parent, d)
				}
				assert.Equal(t, parent, referencedBy[j], "object %d's parent", j)
				var others []string
				for _, d := range w.Objects[j].Deps {
					if d != parent {
						others = append(others, strconv.Itoa(d))
					}
				}
				if parent > 0 {
					body := get(t, s, fmt.Sprintf("/site/%d/%d", p, parent)).Body.String()
					call := fmt.Sprintf("pl.after([%s],function(){pl.add(%d,", strings.Join(others, ","), j)
					assert.True(t, strings.Contains(body, call), "object %d's script calls %s…", parent, call)
					assert.Equal(t, "text/javascript", get(t, s, fmt.Sprintf("/site/%d/%d", p, parent)).Header().Get("Content-Type"))
				}
			}
		})
	}
}

func TestSiteRootIsHTMLWithTags(t *testing.T) {
	s := &Site{Host: func(int) string { return "h" }, Pages: []Workload{{Name: "x", Objects: []Object{
		{Size: 2000},
		{Size: 100, Deps: []int{0}, Type: TypeImage},
		{Size: 100, Deps: []int{0}, Type: TypeStylesheet},
		{Size: 300, Deps: []int{0}, Type: TypeScript},
		{Size: 100, Deps: []int{0}},
	}}}}
	rec := get(t, s, "/site/0/0")
	assert.Equal(t, "text/html; charset=utf-8", rec.Header().Get("Content-Type"))
	body := rec.Body.String()
	assert.Len(t, body, 2000)
	assert.True(t, strings.HasPrefix(body, "<!DOCTYPE html>"))
	assert.True(t, strings.HasSuffix(body, "</body></html>\n"))
	assert.Contains(t, body, `<img src="http://h/site/0/1"`)
	assert.Contains(t, body, `<link rel="stylesheet" href="http://h/site/0/2"`)
	assert.Contains(t, body, `<script async src="http://h/site/0/3"`)
	assert.Contains(t, body, `<img src="http://h/site/0/4"`, "another type loads as an image")
	_, err := png.Decode(strings.NewReader(get(t, s, "/site/0/4").Body.String()))
	assert.NoError(t, err, "and is one")
	assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
	for i, ct := range map[int]string{1: "image/png", 2: "text/css", 3: "text/javascript", 4: "image/png"} {
		rec := get(t, s, fmt.Sprintf("/site/0/%d", i))
		assert.Equal(t, ct, rec.Header().Get("Content-Type"))
		assert.Len(t, rec.Body.String(), int(s.Pages[0].Objects[i].Size))
	}
	assert.True(t, strings.HasPrefix(get(t, s, "/site/0/3").Body.String(), "/*"), "a script is a comment: it runs")
	tiny := &Site{Host: func(int) string { return "h" }, Pages: []Workload{{Objects: []Object{{Size: 10}, {Size: 3, Deps: []int{0}, Type: TypeScript}}}}}
	assert.Equal(t, "   ", get(t, tiny, "/site/0/1").Body.String(), "a script too small for a comment is blanks")
	for _, bad := range []string{"/site/1/0", "/site/0/5", "/site/0/-1", "/site/0", "/site/x/0", "/obj/1"} {
		assert.Equal(t, http.StatusNotFound, get(t, s, bad).Code, bad)
	}
}

func TestTypeOf(t *testing.T) {
	for mime, want := range map[string]Type{
		"image/webp": TypeImage, "text/css; charset=utf-8": TypeStylesheet, "application/javascript": TypeScript,
		"text/javascript": TypeScript, "font/woff2": TypeOther, "text/html": TypeOther, "": TypeOther,
	} {
		assert.Equal(t, want, TypeOf(mime), mime)
	}
}

// TestImagesDecode: a browser stops downloading an image it cannot
// decode, so every image body is a PNG of exactly its size.
func TestImagesDecode(t *testing.T) {
	for _, size := range []int64{100, 101, 1_000, 100_000, 1_000_001} {
		body := imageOf(size)
		require.Len(t, body, int(size))
		img, err := png.Decode(strings.NewReader(body))
		require.NoError(t, err, "size %d", size)
		assert.Equal(t, 1, img.Bounds().Dx())
	}
	assert.Len(t, imageOf(10), 10, "below the smallest PNG: that many bytes")
}
