package billing_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/quotaplatform/quota/ledger/billing"
)

// Reads is the path every billing read takes: each step's refusal, the
// query's failures, and the format chosen.
func TestReadsServe(t *testing.T) {
	access, err := billing.NewAccess([]billing.Token{{Secret: tokA}, {Secret: tokB, Prefix: "acct_"}})
	if err != nil {
		t.Fatal(err)
	}
	// format writes "as <label>", so the body shows which was chosen.
	format := func(name, label, contentType string, mediaTypes ...string) billing.Format {
		return billing.Format{Name: name, ContentType: contentType, MediaTypes: mediaTypes,
			Write: func(_ context.Context, w http.ResponseWriter) error {
				_, err := io.WriteString(w, "as "+label)
				return err
			}}
	}
	named := []billing.Format{format("ndjson", "ndjson", "application/x-ndjson", "application/x-ndjson"), format("csv", "csv", "text/csv", "text/csv")}
	unnamed := []billing.Format{format("", "json", "application/json", "application/json", "*/*"), format("", "csv", "text/csv", "text/csv")}

	tests := []struct {
		name     string
		method   string
		token    string
		url      string
		accept   string
		access   *billing.Access
		key      string
		run      error // nil: succeeds
		streamed bool  // no Run
		formats  []billing.Format
		parseErr error
		want     int
		body     string // contained
	}{
		{name: "json by default", url: "/", formats: unnamed, want: 200, body: "as json"},
		{name: "csv by Accept", url: "/", accept: "text/html, text/csv", formats: unnamed, want: 200, body: "as csv"},
		{name: "q=0 skipped", url: "/", accept: "text/csv;q=0, */*", formats: unnamed, want: 200, body: "as json"},
		{name: "format= ignored without names", url: "/?format=xml", formats: unnamed, want: 200, body: "as json"},
		{name: "format= picks", url: "/?format=csv", accept: "application/x-ndjson", formats: named, want: 200, body: "as csv"},
		{name: "format= unknown", url: "/?format=xml", formats: named, want: 400, body: `"field":"format"`},
		{name: "parse error first", url: "/?format=xml", formats: named, parseErr: &billing.FieldError{Field: "from", Err: errors.New("bad")}, want: 400, body: `"field":"from"`},
		{name: "method", method: http.MethodPost, url: "/", formats: unnamed, want: 405},
		{name: "disabled", url: "/", access: &billing.Access{}, formats: unnamed, want: 503, body: "billing API disabled"},
		{name: "no token", token: "-", url: "/", formats: unnamed, want: 401, body: `"field":"Authorization"`},
		{name: "wrong token", token: "tok-W-0123456789abcdef", url: "/", formats: unnamed, want: 403, body: "wrong billing token"},
		{name: "key outside the prefix", token: tokB, key: "other", url: "/", formats: unnamed, want: 403, body: `"field":"key"`},
		{name: "key inside the prefix", token: tokB, key: "acct_1", url: "/", formats: unnamed, want: 200, body: "as json"},
		{name: "query field error", url: "/", run: &billing.FieldError{Field: "to", Err: errors.New("too long")}, formats: unnamed, want: 400, body: `"field":"to"`},
		{name: "overflow", url: "/", run: fmt.Errorf("%w: bucket", billing.ErrOverflow), formats: unnamed, want: 422},
		{name: "timeout", url: "/", run: billing.ErrTimeout, formats: unnamed, want: 503, body: "the test query exceeded the statement timeout: retry later"},
		{name: "ledger down", url: "/", run: errors.New("connection refused"), formats: unnamed, want: 503, body: "ledger unavailable"},
		{name: "streamed HEAD runs nothing", method: http.MethodHead, streamed: true, url: "/", formats: named, want: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := access
			if tt.access != nil {
				a = tt.access
			}
			ran, wrote := false, false
			formats := make([]billing.Format, len(tt.formats))
			for i, f := range tt.formats {
				write := f.Write
				f.Write = func(ctx context.Context, w http.ResponseWriter) error { wrote = true; return write(ctx, w) }
				formats[i] = f
			}
			read := billing.Read{Key: tt.key, What: "test", OnTimeout: "retry later", Formats: formats}
			if !tt.streamed {
				read.Run = func(context.Context) error { ran = true; return tt.run }
			}
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			req := httptest.NewRequest(method, tt.url, nil)
			switch tt.token {
			case "":
				req.Header.Set("Authorization", "Bearer "+tokA)
			case "-":
			default:
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			if tt.accept != "" {
				req.Header.Set("Accept", tt.accept)
			}
			rec := httptest.NewRecorder()
			billing.Reads{Access: a}.Serve(rec, req, func(*billing.Params, billing.Scope) (billing.Read, error) { return read, tt.parseErr })
			if rec.Code != tt.want || !strings.Contains(rec.Body.String(), tt.body) {
				t.Fatalf("got %d %q, want %d containing %q", rec.Code, rec.Body.String(), tt.want, tt.body)
			}
			if tt.streamed && (ran || wrote) {
				t.Fatalf("a streamed HEAD ran %v, wrote %v: want neither", ran, wrote)
			}
		})
	}
}

// Params keeps the first parameter that does not parse, named, and parses
// nothing after it.
func TestParams(t *testing.T) {
	values := map[string]string{"a": "1", "b": "x", "c": "3"}
	p := billing.NewParams(func(k string) string { return values[k] })
	calls := 0
	parse := func(v string) (int, error) {
		calls++
		var n int
		if _, err := fmt.Sscan(v, &n); err != nil {
			return 0, errors.New("not a number: " + v)
		}
		return n, nil
	}
	a, b, c := billing.Param(p, "a", parse), billing.Param(p, "b", parse), billing.Param(p, "c", parse)
	var fe *billing.FieldError
	if !errors.As(p.Err(), &fe) || fe.Field != "b" || fe.Error() != "billing: b: not a number: x" {
		t.Fatalf("Err() = %v, want the FieldError of b", p.Err())
	}
	if a != 1 || b != 0 || c != 0 || calls != 2 {
		t.Fatalf("a=%d b=%d c=%d after %d parses, want 1 0 0 after 2", a, b, c, calls)
	}
}
