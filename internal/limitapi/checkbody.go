package limitapi

import (
	"bytes"
	"io"
	"net/http"
	"sync"
)

// A single check reads its body into a pooled buffer, decodes it by hand
// (parseCheck) and writes its answer from the same buffer. Bodies the hand
// decoder does not take, valid or not, are decoded by encoding/json from
// the bytes already read followed by the rest of the body (decodeCheckSlow),
// so every error and every rarer valid form is answered exactly as
// decodeBody answers it.

// checkBuf is a pooled buffer of one single check.
type checkBuf struct{ b []byte }

// maxPooledBuf is the largest buffer given back to the pool, so that one
// large body does not keep its buffer alive.
const maxPooledBuf = 16 << 10

var bufPool = sync.Pool{New: func() any { return &checkBuf{b: make([]byte, 0, 512)} }}

func getBuf() *checkBuf { return bufPool.Get().(*checkBuf) }

func putBuf(buf *checkBuf) {
	if cap(buf.b) > maxPooledBuf {
		return
	}
	buf.b = buf.b[:0]
	bufPool.Put(buf)
}

// decodeCheck decodes the body of POST /v1/allow, of at most limit bytes,
// reading it into buf. The check it returns does not refer to buf.
func decodeCheck(w http.ResponseWriter, r *http.Request, limit int64, buf *checkBuf) (check, *apiError) {
	var rest io.Reader
	complete := true
	buf.b = buf.b[:0]
	if r.Body != nil {
		buf.b, complete, rest = readBody(r.Body, buf.b, limit)
	}
	if complete {
		if c, ok := parseCheck(buf.b); ok {
			return c, nil
		}
	}
	return decodeCheckSlow(w, buf.b, rest, limit)
}

// decodeCheckSlow decodes a check with encoding/json from read, the bytes
// of the body already read, followed by rest (nil: nothing follows).
func decodeCheckSlow(w http.ResponseWriter, read []byte, rest io.Reader, limit int64) (check, *apiError) {
	var body io.Reader = bytes.NewReader(read)
	if rest != nil {
		body = io.MultiReader(body, rest)
	}
	var c checkRequest
	if e := decodeFrom(w, io.NopCloser(body), limit, &c); e != nil {
		return check{}, e
	}
	return c.check(), nil
}

// readBody appends body to b until it ends or holds more than limit
// bytes. complete says it ended (io.EOF) within limit bytes. Otherwise
// rest is what follows the bytes read: the rest of the body when it is
// larger than limit, a reader of its read error when reading failed.
func readBody(body io.Reader, b []byte, limit int64) (read []byte, complete bool, rest io.Reader) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		end := cap(b)
		if int64(end) > limit+1 {
			end = int(limit + 1)
		}
		n, err := body.Read(b[len(b):end])
		b = b[:len(b)+n]
		switch {
		case err != nil && err != io.EOF:
			return b, false, errReader{err}
		case int64(len(b)) > limit:
			if err == io.EOF {
				return b, false, nil
			}
			return b, false, body
		case err == io.EOF:
			return b, true, nil
		}
	}
}

// errReader fails every read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// parseCheck decodes the common form of a check body: one JSON object
// whose members are "key", "endpoint" and "request_id" with strings of
// printable ASCII without escapes, and "cost" with an integer of at most 18 digits, each
// at most once, in any order, with JSON whitespace anywhere between
// tokens. It reports false for anything else, valid JSON or not: a name
// in another case, an escape, null, a fraction or exponent, a repeated
// member, an unknown member, trailing data.
func parseCheck(b []byte) (c check, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return c, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return c, skipSpace(b, i+1) == len(b)
	}
	var haveKey bool
	for {
		name, j, ok := parseSimpleString(b, i)
		if !ok {
			return c, false
		}
		i = skipSpace(b, j)
		if i >= len(b) || b[i] != ':' {
			return c, false
		}
		i = skipSpace(b, i+1)
		switch string(name) {
		case "key":
			v, j, ok := parseSimpleString(b, i)
			if !ok || haveKey {
				return c, false
			}
			c.key, haveKey, i = string(v), true, j
		case "endpoint":
			v, j, ok := parseSimpleString(b, i)
			if !ok || c.hasEndpoint {
				return c, false
			}
			c.endpoint, c.hasEndpoint, i = string(v), true, j
		case "cost":
			n, j, ok := parseInt(b, i)
			if !ok || c.hasCost {
				return c, false
			}
			c.cost, c.hasCost, i = n, true, j
		case "request_id":
			v, j, ok := parseSimpleString(b, i)
			if !ok || c.hasRequestID {
				return c, false
			}
			c.requestID, c.hasRequestID, i = string(v), true, j
		default:
			return c, false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return c, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return c, skipSpace(b, i+1) == len(b)
		default:
			return c, false
		}
	}
}

// skipSpace returns the index of the first byte at or after i that is
// not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// parseSimpleString parses the JSON string at b[i] when it holds only
// printable ASCII and no escape, and returns its content and the index
// after its closing quote.
func parseSimpleString(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// parseInt parses the JSON integer at b[i] (no fraction or exponent, at
// most 18 digits, so that it fits an int64) and returns it and the index
// after it. The byte after it is left to the caller, which accepts only
// whitespace, ',' or '}' there.
func parseInt(b []byte, i int) (n int64, next int, ok bool) {
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		n = n*10 + int64(b[i]-'0')
	}
	switch digits := i - start; {
	case digits == 0 || digits > 18:
		return 0, 0, false
	case digits > 1 && b[start] == '0':
		return 0, 0, false // a leading zero: not JSON
	}
	if neg {
		n = -n
	}
	return n, i, true
}
