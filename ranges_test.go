package intents

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// answerTo builds the response a server might give to a range request.
func answerTo(status int, contentRange string, length int64, etag, encoding string) *http.Response {
	h := http.Header{}
	if contentRange != "" {
		h.Set("Content-Range", contentRange)
	}
	if etag != "" {
		h.Set("ETag", etag)
	}
	if encoding != "" {
		h.Set("Content-Encoding", encoding)
	}
	return &http.Response{StatusCode: status, Header: h, ContentLength: length, Body: http.NoBody}
}

func TestByteRangeCheck(t *testing.T) {
	v1 := validator{"ETag", `"v1"`}
	for _, tc := range []struct {
		name string
		ask  byteRange
		resp *http.Response
		want answer
		part part
	}{
		{"first range", firstRange(8192), answerTo(206, "bytes 0-8191/100000", 8192, `"v1"`, ""), answerPart, part{0, 8191, 100000}},
		{"first range of a small object", firstRange(8192), answerTo(206, "bytes 0-99/100", 100, "", ""), answerPart, part{0, 99, 100}},
		{"chunked part", firstRange(8192), answerTo(206, "bytes 0-8191/100000", -1, "", ""), answerPart, part{0, 8191, 100000}},
		{"larger than asked", firstRange(8192), answerTo(206, "bytes 0-8192/100000", 8193, "", ""), answerBad, part{}},
		{"huge", firstRange(8192), answerTo(206, "bytes 0-4611686018427387903/4611686018427388903", 1<<62, "", ""), answerBad, part{}},
		{"shorter than asked, not at the end", firstRange(8192), answerTo(206, "bytes 0-99/100000", 100, "", ""), answerBad, part{}},
		{"another start", firstRange(8192), answerTo(206, "bytes 1-8192/100000", 8192, "", ""), answerBad, part{}},
		{"length disagrees", firstRange(8192), answerTo(206, "bytes 0-8191/100000", 1000, "", ""), answerBad, part{}},
		{"gzip", firstRange(8192), answerTo(206, "bytes 0-8191/100000", 8192, "", "gzip"), answerBad, part{}},
		{"multipart", firstRange(8192), answerTo(206, "", -1, "", ""), answerBad, part{}},
		{"whole", firstRange(8192), answerTo(200, "", 100000, "", ""), answerWhole, part{}},
		{"unsatisfiable", firstRange(8192), answerTo(416, "bytes */0", 0, "", ""), answerUnsatisfiable, part{}},
		{"not found", firstRange(8192), answerTo(404, "", 0, "", ""), answerOther, part{}},
		{"the rest", byteRange{8192, -1, 100000, v1}, answerTo(206, "bytes 8192-99999/100000", 91808, `"v1"`, ""), answerPart, part{8192, 99999, 100000}},
		{"the rest, total changed", byteRange{8192, -1, 100000, v1}, answerTo(206, "bytes 8192-100499/100500", 92308, `"v1"`, ""), answerBad, part{}},
		{"the rest, another version", byteRange{8192, -1, 100000, v1}, answerTo(206, "bytes 8192-99999/100000", 91808, `"v2"`, ""), answerChanged, part{}},
		{"the rest, no validator", byteRange{8192, -1, 100000, v1}, answerTo(206, "bytes 8192-99999/100000", 91808, "", ""), answerChanged, part{}},
		{"a middle range", byteRange{100, 199, 1000, v1}, answerTo(206, "bytes 100-199/1000", 100, `"v1"`, ""), answerPart, part{100, 199, 1000}},
		{"a middle range, cut short", byteRange{100, 199, 1000, v1}, answerTo(206, "bytes 100-150/1000", 51, `"v1"`, ""), answerBad, part{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, got, err := tc.ask.check(tc.resp)
			assert.Equal(t, tc.want, got, "%v", err)
			assert.Equal(t, tc.part, p)
			if got == answerBad || got == answerChanged {
				assert.Error(t, err)
			}
		})
	}
}

func TestByteRangeRequest(t *testing.T) {
	req, _ := http.NewRequest("GET", "http://example.test/x", nil)
	r := firstRange(8192).request(t.Context(), req)
	assert.Equal(t, "bytes=0-8191", r.Header.Get("Range"))
	assert.Empty(t, r.Header.Get("If-Range"))
	r = byteRange{8192, -1, 100000, validator{"ETag", `"v1"`}}.request(t.Context(), req)
	assert.Equal(t, "bytes=8192-", r.Header.Get("Range"))
	assert.Equal(t, `"v1"`, r.Header.Get("If-Range"))
	assert.Empty(t, req.Header.Get("Range"), "the caller's request is not touched")
}

func TestPartBodyIsExact(t *testing.T) {
	read := func(body string, n int64) (string, error) {
		b, err := io.ReadAll(part{0, n - 1, n}.body(io.NopCloser(strings.NewReader(body))))
		return string(b), err
	}
	got, err := read("0123456789", 10)
	assert.NoError(t, err)
	assert.Equal(t, "0123456789", got)
	got, err = read("0123456789junk", 10)
	assert.NoError(t, err)
	assert.Equal(t, "0123456789", got, "nothing beyond the range")
	got, err = read("01234", 10)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
	assert.Equal(t, "01234", got)
}

func TestParseContentRange(t *testing.T) {
	s, e, total, err := parseContentRange("bytes 0-8191/100000")
	require.NoError(t, err)
	assert.Equal(t, []int64{0, 8191, 100000}, []int64{s, e, total})
	for _, bad := range []string{"", "bytes */100", "bytes 5-4/10", "bytes 0-10/10", "items 0-1/2", "bytes 0-x/5",
		"bytes -1-2/5", "bytes +1-2/5", "bytes 0-+2/5", "bytes 0-1/+5", "bytes 0-1/*", "bytes 0-99999999999999999999/1"} {
		_, _, _, err := parseContentRange(bad)
		assert.Error(t, err, bad)
	}
}

// FuzzParseContentRange: whatever the header, the parse never panics and
// what it accepts is an ordered range inside its total, written the same
// way back.
func FuzzParseContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-8191/100000", "bytes 0-0/1", "bytes */0", "bytes 9223372036854775806-9223372036854775806/9223372036854775807", "bytes 1--2/3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		first, last, total, err := parseContentRange(s)
		if err != nil {
			return
		}
		if first < 0 || last < first || total <= last {
			t.Fatalf("%q: %d-%d/%d", s, first, last, total)
		}
		back := "bytes " + strconv.FormatInt(first, 10) + "-" + strconv.FormatInt(last, 10) + "/" + strconv.FormatInt(total, 10)
		f2, l2, t2, err := parseContentRange(back)
		if err != nil || f2 != first || l2 != last || t2 != total {
			t.Fatalf("%q parsed as %q, which does not parse back", s, back)
		}
	})
}

// FuzzCheckRange: whatever a server answers to a range request, a part is
// accepted only if it is exactly what was asked for (no byte more), and
// its body hands out exactly its size or an error.
func FuzzCheckRange(f *testing.F) {
	f.Add(int64(0), int64(8191), int64(-1), 206, "bytes 0-8191/100000", int64(8192), `"v1"`, "", 8192)
	f.Add(int64(8192), int64(-1), int64(100000), 206, "bytes 8192-99999/100000", int64(-1), `"v1"`, "", 100)
	f.Add(int64(0), int64(8191), int64(-1), 206, "bytes 0-4611686018427387903/4611686018427388903", int64(1<<62), "", "", 10)
	f.Add(int64(0), int64(99), int64(-1), 200, "", int64(5), "", "", 5)
	f.Fuzz(func(t *testing.T, first, last, total int64, status int, cr string, length int64, etag, encoding string, bodyLen int) {
		if first < 0 || (last >= 0 && last < first) || bodyLen < 0 || bodyLen > 1<<16 {
			return // we never ask for such ranges
		}
		ask := byteRange{first: first, last: last, total: total}
		if total >= 0 {
			ask.v = validator{"ETag", `"v1"`}
		}
		resp := answerTo(status, cr, length, etag, encoding)
		resp.Body = io.NopCloser(strings.NewReader(strings.Repeat("x", bodyLen)))
		p, kind, _ := ask.check(resp)
		if kind != answerPart {
			return
		}
		if p.first != first || (last >= 0 && p.last > last) || p.last < p.first || p.total <= p.last {
			t.Fatalf("asked %+v, accepted %+v from %q", ask, p, cr)
		}
		if total >= 0 && p.total != total {
			t.Fatalf("asked for a range of %d bytes, accepted one of %d", total, p.total)
		}
		if length >= 0 && length != p.size() {
			t.Fatalf("accepted Content-Length %d for %d bytes", length, p.size())
		}
		n, err := io.Copy(io.Discard, p.body(resp.Body))
		if err == nil && n != p.size() || n > p.size() {
			t.Fatalf("body of %d bytes handed out %d (err %v)", p.size(), n, err)
		}
	})
}
