package billing_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

type fixedQuerier struct{ got billing.Query }

// testAccess grants tokA every key.
func testAccess(t *testing.T) *billing.Access {
	t.Helper()
	a, err := billing.NewAccess([]billing.Token{{Secret: tokA}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// decodeError returns the string fields of a JSON body.
func decodeError(t *testing.T, b []byte) map[string]string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
	out := make(map[string]string)
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// get sends GET url with tokA and accept.
func get(t *testing.T, url, accept string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tokA)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func (f *fixedQuerier) Usage(_ context.Context, q billing.Query) (billing.Result, error) {
	f.got = q
	return billing.Result{Key: q.Key, Granularity: q.Granularity, Complete: true, Rows: []billing.Row{}}, nil
}

func TestHandlerRejectsBadParams(t *testing.T) {
	tests := []struct {
		query string
		field string
	}{
		{"from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z", "key"},
		{"key=" + strings.Repeat("k", 600) + "&from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z", "key"},
		{"key=k&to=2026-01-02T00:00:00Z", "from"},
		{"key=k&from=yesterday&to=2026-01-02T00:00:00Z", "from"},
		{"key=k&from=2026-01-01T00:00:00Z", "to"},
		{"key=k&from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", "to"},
		{"key=k&from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z&granularity=minute", "granularity"},
		{"key=k&from=2020-01-01T00:00:00Z&to=2026-01-02T00:00:00Z", "to"},
		{"key=k&from=2026-01-01T00:00:00Z&to=2026-03-01T00:00:00Z&granularity=window", "to"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			h := &billing.Handler{Ledger: &fixedQuerier{}, Access: testAccess(t)}
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/v1/usage?"+tt.query, nil)
			req.Header.Set("Authorization", "Bearer "+tokA)
			h.ServeHTTP(rec, req)
			body := decodeError(t, rec.Body.Bytes())
			if rec.Code != http.StatusBadRequest || body["field"] != tt.field || body["error"] == "" {
				t.Fatalf("status %d body %v, want 400 naming %q", rec.Code, body, tt.field)
			}
		})
	}
}

func FuzzParseQuery(f *testing.F) {
	f.Add("k", "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", "hour")
	f.Add("", "x", "", "window")
	f.Fuzz(func(t *testing.T, key, from, to, gran string) {
		v := map[string]string{"key": key, "from": from, "to": to, "granularity": gran}
		q, err := billing.ParseQuery(func(s string) string { return v[s] })
		if err == nil && q.Validate() != nil {
			t.Fatalf("ParseQuery accepted an invalid query %+v", q)
		}
	})
}

// seed creates a migrated database with usage rows and returns its URL and
// a writer's pool on it.
func seed(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	url, pool := ledgertest.Database(t)
	ctx := context.Background()
	// key "acme": windows of 60s starting 10:00:30; two processes; the
	// 11:00:30 window has degraded cost; the 11:01:30 window misses p2's
	// final.
	base := time.Date(2026, 3, 1, 10, 0, 30, 0, time.UTC)
	var reps []ledger.Report
	add := func(start time.Time, proc string, spent, leased, degraded int64, final bool) {
		reps = append(reps, ledger.Report{Key: "acme", WindowStart: start, WindowEnd: start.Add(time.Minute),
			ProcessID: proc, Region: "eu", Spent: spent, Leased: leased, Degraded: degraded, Final: final, Seq: 1, SentAt: start})
	}
	add(base, "p1", 10, 12, 0, true)
	add(base, "p2", 5, 5, 0, true)
	add(base.Add(time.Minute), "p1", 7, 9, 0, true)
	add(base.Add(time.Hour), "p1", 20, 20, 4, true)
	add(base.Add(time.Hour+time.Minute), "p1", 1, 1, 0, true)
	add(base.Add(time.Hour+time.Minute), "p2", 2, 3, 0, false)
	add(base.Add(24*time.Hour), "p1", 100, 100, 0, true) // outside the range below
	reps = append(reps, ledger.Report{Key: "other", WindowStart: base, WindowEnd: base.Add(time.Minute),
		ProcessID: "p1", Region: "eu", Spent: 999, Seq: 1, SentAt: base})
	if _, err := reconcile.NewWriter(pool).Write(ctx, reps); err != nil {
		t.Fatal(err)
	}
	return url, pool
}

// newLedger returns a Ledger on its own billing pool (NewPool), as the
// daemon makes it.
func newLedger(t *testing.T, url string, cfg billing.Config) (*billing.Ledger, *pgxpool.Pool) {
	t.Helper()
	pool, err := billing.NewPool(url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	l, err := billing.NewLedger(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l, pool
}

func TestUsageFromLedger(t *testing.T) {
	url, _ := seed(t)
	l, _ := newLedger(t, url, billing.DefaultConfig())
	srv := httptest.NewServer(&billing.Handler{Ledger: l, Access: testAccess(t)})
	defer srv.Close()
	from, to := "2026-03-01T10:00:00Z", "2026-03-02T00:00:00Z"
	type row struct {
		start              string
		net, leased, wins  int64
		degraded, complete bool
	}
	tests := []struct {
		gran string
		rows []row
	}{
		{"hour", []row{{"2026-03-01T10:00:00Z", 22, 26, 2, false, true}, {"2026-03-01T11:00:00Z", 23, 24, 2, true, false}}},
		{"day", []row{{"2026-03-01T00:00:00Z", 45, 50, 4, true, false}}},
		{"window", []row{
			{"2026-03-01T10:00:30Z", 15, 17, 1, false, true}, {"2026-03-01T10:01:30Z", 7, 9, 1, false, true},
			{"2026-03-01T11:00:30Z", 20, 20, 1, true, true}, {"2026-03-01T11:01:30Z", 3, 4, 1, false, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.gran, func(t *testing.T) {
			resp := get(t, srv.URL+"/v1/usage?key=acme&from="+from+"&to="+to+"&granularity="+tt.gran, "")
			var res billing.Result
			if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || res.Totals.Net != 45 || res.Totals.Leased != 50 || res.Totals.OverAuthorized != 5 ||
				res.Totals.Degraded != 4 || !res.IsDegraded || res.Complete {
				t.Fatalf("status %d totals %+v degraded %v complete %v", resp.StatusCode, res.Totals, res.IsDegraded, res.Complete)
			}
			if len(res.Rows) != len(tt.rows) {
				t.Fatalf("%d rows, want %d: %+v", len(res.Rows), len(tt.rows), res.Rows)
			}
			for i, w := range tt.rows {
				g := res.Rows[i]
				got := row{g.Start.Format(time.RFC3339), g.Net, g.Leased, int64(g.Windows), g.IsDegraded, g.Complete}
				if got != w {
					t.Fatalf("row %d: %+v, want %+v", i, got, w)
				}
			}
		})
	}
	t.Run("csv", func(t *testing.T) {
		resp := get(t, srv.URL+"/v1/usage?key=acme&from="+from+"&to="+to+"&granularity=day", "text/csv")
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		want := "key,start,end,net,leased,rejected,degraded_cost,over_authorized,windows,degraded,complete,allowed,refunded,charged,closed_by_reconciler\n" +
			"acme,2026-03-01T00:00:00Z,2026-03-02T00:00:00Z,45,50,0,4,5,4,true,false,45,0,0,0\n" +
			"acme,total,,45,50,0,4,5,4,true,false,45,0,0,0\n"
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/csv") || b.String() != want {
			t.Fatalf("content type %q body:\n%s\nwant:\n%s", ct, b.String(), want)
		}
	})
}
