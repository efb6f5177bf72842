package limitapi

import (
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// chunkReader returns body at most chunk bytes a read, then err (io.EOF
// when nil).
type chunkReader struct {
	body  []byte
	chunk int
	err   error
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.body) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		return 0, io.EOF
	}
	n := min(len(p), len(r.body), max(r.chunk, 1))
	copy(p, r.body[:n])
	r.body = r.body[n:]
	return n, nil
}

// checkDecodesAsJSON decodes body with decodeCheck and with decodeBody
// into a checkRequest (the single check's decoding before the hand-written
// decoder, and its fallback), and fails unless both give the same check or
// the same error.
func checkDecodesAsJSON(t *testing.T, body string, limit int64, chunk int, readErr error) {
	t.Helper()
	r := httptest.NewRequest("POST", "/v1/allow", &chunkReader{body: []byte(body), chunk: chunk, err: readErr})
	buf := getBuf()
	got, gotErr := decodeCheck(httptest.NewRecorder(), r, limit, buf)
	putBuf(buf)

	r = httptest.NewRequest("POST", "/v1/allow", &chunkReader{body: []byte(body), chunk: chunk, err: readErr})
	var want checkRequest
	wantErr := decodeBody(httptest.NewRecorder(), r, limit, &want)
	switch {
	case gotErr == nil && wantErr == nil:
		if got != want.check() {
			t.Fatalf("body %q: decoded %+v, encoding/json %+v", body, got, want.check())
		}
	case gotErr == nil || wantErr == nil:
		t.Fatalf("body %q: error %v, encoding/json's %v", body, gotErr, wantErr)
	case *gotErr != *wantErr:
		t.Fatalf("body %q: error %+v, encoding/json's %+v", body, *gotErr, *wantErr)
	}
}

var checkBodies = []string{
	`{"key":"acct_1","cost":1}`,
	`{"key":"acct_1"}`,
	`{}`,
	` { "cost" : 7 , "key" : "a" } ` + "\n\t\r",
	`{"key":"a","endpoint":"/search"}`,
	`{"key":"a","cost":-0}`,
	`{"key":"a","cost":-12}`,
	`{"key":"a","cost":999999999999999999}`,
	`{"key":"a","cost":9999999999999999999}`,
	`{"key":"a","cost":99999999999999999999999}`,
	`{"key":"a","cost":012}`,
	`{"key":"a","cost":1.0}`,
	`{"key":"a","cost":1e3}`,
	`{"key":"a","cost":-}`,
	`{"key":"a","cost":null}`,
	`{"key":null}`,
	`{"key":"a","key":"b"}`,
	`{"cost":1,"cost":2,"key":"a"}`,
	`{"KEY":"a","Cost":2}`,
	`{"key":"a\u0062"}`,
	`{"key":"a\"b"}`,
	`{"key":"ключ"}`,
	"{\"key\":\"a\x7f\"}",
	"{\"key\":\"a\x01\"}",
	"{\"key\":\"\xff\"}",
	`{"key":""}`,
	`{"key":"a","cost":"3"}`,
	`{"key":7}`,
	`{"key":"a","costs":1}`,
	`{"key":"a","":1}`,
	`{"key":"a",}`,
	`{"key":"a"`,
	`{"key":"a"} {}`,
	`{"key":"a"}x`,
	`{"key":"a"}}`,
	`{"key" "a"}`,
	`{,}`,
	`{"key":`,
	`[1]`,
	`null`,
	`hello`,
	``,
	`   `,
	`"key"`,
	"\ufeff{\"key\":\"a\"}",
	`{"key":"a","endpoint":"x","cost":1}`,
	`{"key":"a","cost":2,"request_id":"req-1"}`,
	`{"request_id":"r","request_id":"r"}`,
	`{"key":"a","request_id":7}`,
	`{"key":"a","request_id":"r\u0041"}`,
	`{"key":"a","request_id":null}`,
	`{"key":"a","checks":[]}`,
	`{"key":"` + strings.Repeat("k", 600) + `"}`,
	`{"key":"a"}` + strings.Repeat(" ", 700),
	`{"key":"a"` + strings.Repeat(" ", 700),
	`{"key":1` + strings.Repeat(" ", 700) + `}`,
	`{"key":"a"}` + strings.Repeat(" ", 589),
	`{"key":"a"}` + strings.Repeat(" ", 590),
}

// The hand-written decoder gives what encoding/json gives, error messages
// included, whatever the body, however it arrives, within the limit or
// over it, and when reading it fails.
func TestDecodeCheckMatchesJSON(t *testing.T) {
	for _, body := range checkBodies {
		for _, chunk := range []int{1, 3, 512, 1 << 20} {
			checkDecodesAsJSON(t, body, 600, chunk, nil)
			checkDecodesAsJSON(t, body, 600, chunk, errors.New("connection reset"))
		}
	}
}

func FuzzDecodeCheck(f *testing.F) {
	for _, body := range checkBodies {
		f.Add(body, uint16(0))
		f.Add(body, uint16(5))
	}
	f.Fuzz(func(t *testing.T, body string, chunk uint16) {
		var readErr error
		if chunk&1 == 1 {
			readErr = errors.New("connection reset")
		}
		checkDecodesAsJSON(t, body, 600, int(chunk>>1), readErr)
	})
}

// parseCheck takes the common forms; the rest goes to encoding/json.
func TestParseCheckTakes(t *testing.T) {
	for body, want := range map[string]check{
		`{"key":"acct_1","cost":1}`:             {key: "acct_1", cost: 1, hasCost: true},
		` {"key" : "a" ,"endpoint":"/s/{id}"} `: {key: "a", endpoint: "/s/{id}", hasEndpoint: true},
		`{"cost":-3}`:                           {cost: -3, hasCost: true},
		`{"key":"a","request_id":"r-1"}`:        {key: "a", requestID: "r-1", hasRequestID: true},
		`{}`:                                    {},
	} {
		got, ok := parseCheck([]byte(body))
		if !ok || got != want {
			t.Errorf("parseCheck(%s) = %+v, %v; want %+v", body, got, ok, want)
		}
	}
	for _, body := range []string{`{"key":"a\n"}`, `{"key":null}`, `{"Key":"a"}`, `{"key":"a","key":"a"}`, `{"cost":1.0}`, `{"key":"a"} {}`} {
		if _, ok := parseCheck([]byte(body)); ok {
			t.Errorf("parseCheck(%s) took it", body)
		}
	}
}
