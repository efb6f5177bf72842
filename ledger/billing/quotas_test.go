package billing_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/quotabase/pgledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// seedQuotas creates a migrated database with mirrored plans and
// assignments (as ledger/planmirror writes them) and usage, and returns its
// URL and a writer's pool.
//
// Plan pro: a day and a month quota on New York's calendar, months from
// the 31st (in February, the 28th). acct_pro's usage, by window start:
//
//	2026-02-28 04:59:30Z  allowed 4                       Feb 27 23:59:30 EST: January's period
//	2026-02-28 05:00:00Z  allowed 10, charged 5, refunded 3 = 12   Feb 28 00:00 EST: February's period begins
//	2026-03-01 10:00:00Z  allowed 7 (region us)            February's period
//	2026-03-15 12:00:00Z  allowed 100, refunded 40 = 60    Mar 15 08:00 EDT
//	2026-03-31 04:00:00Z  allowed 1000                     Mar 31 00:00 EDT: March's period begins
func seedQuotas(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	url, pool := ledgertest.Database(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
		INSERT INTO quota_plans (name, quotas, time_zone, anchor_day, revision) VALUES
			('pro', '[{"period":"day","limit":1000},{"period":"month","limit":1000000}]', 'America/New_York', 31, 3),
			('default', '[{"period":"month","limit":500}]', '', 0, 4),
			('plain', '[]', '', 0, 5),
			('dropped', '[{"period":"hour","limit":1}]', '', 0, 6);
		UPDATE quota_plans SET deleted = true, quotas = '[]' WHERE name = 'dropped';
		INSERT INTO quota_key_plans (key, plan, revision) VALUES
			('acct_pro', 'pro', 7), ('acct_plain', 'plain', 8), ('acct_missing', 'missing', 9), ('acct_dropped', 'dropped', 10);
		INSERT INTO quota_key_plans (key, plan, deleted, revision) VALUES ('acct_unassigned', NULL, true, 11)`); err != nil {
		t.Fatal(err)
	}
	var reps []ledger.Report
	add := func(key, start, region string, spent, charged, refunded int64) {
		s, err := time.Parse(time.RFC3339, start)
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, ledger.Report{Key: key, WindowStart: s, WindowEnd: s.Add(time.Minute), ProcessID: region + "-1",
			Region: region, Spent: spent, Leased: spent, Charged: charged, Refunded: refunded, Final: true, Seq: 1, SentAt: s})
	}
	add("acct_pro", "2026-02-28T04:59:30Z", "eu", 4, 0, 0)
	add("acct_pro", "2026-02-28T05:00:00Z", "eu", 10, 5, 3)
	add("acct_pro", "2026-03-01T10:00:00Z", "us", 7, 0, 0)
	add("acct_pro", "2026-03-15T12:00:00Z", "eu", 100, 0, 40)
	add("acct_pro", "2026-03-31T04:00:00Z", "eu", 1000, 0, 0)
	add("acct_unassigned", "2026-03-02T00:00:00Z", "eu", 800, 0, 0)
	add("acct_pro_other", "2026-03-15T12:00:00Z", "eu", 99, 0, 0)
	if _, err := reconcile.NewWriter(pool).Write(ctx, reps); err != nil {
		t.Fatal(err)
	}
	return url, pool
}

type quotaRow struct {
	period, start, end     string
	limit, used, remaining int64
}

func quotaRows(res billing.QuotaResult) []quotaRow {
	out := []quotaRow{}
	for _, q := range res.Quotas {
		out = append(out, quotaRow{string(q.Period), q.Start.Format(time.RFC3339), q.End.Format(time.RFC3339), q.Limit, q.Used, q.Remaining})
	}
	return out
}

// Each quota's period on the plan's calendar (a month anchored on the 31st
// in New York: February's starts on the 28th, March's on the 31st at 00:00
// EDT), its used net of refunds and with charges, and what remains,
// clamped at 0; a key's plan as the catalogue resolves it.
func TestQuotasFromLedger(t *testing.T) {
	url, pool := seedQuotas(t)
	l, _ := newLedger(t, url, billing.DefaultConfig())
	ctx := context.Background()
	tests := []struct {
		name, key, at string
		plan, zone    string
		anchor        int
		rows          []quotaRow
	}{
		{"mid-March: February's period", "acct_pro", "2026-03-15T12:30:00Z", "pro", "America/New_York", 31, []quotaRow{
			{"day", "2026-03-15T04:00:00Z", "2026-03-16T04:00:00Z", 1000, 60, 940},
			{"month", "2026-02-28T05:00:00Z", "2026-03-31T04:00:00Z", 1_000_000, 79, 1_000_000 - 79},
		}},
		{"a second before February's period", "acct_pro", "2026-02-28T04:59:59Z", "pro", "America/New_York", 31, []quotaRow{
			{"day", "2026-02-27T05:00:00Z", "2026-02-28T05:00:00Z", 1000, 4, 996},
			{"month", "2026-01-31T05:00:00Z", "2026-02-28T05:00:00Z", 1_000_000, 4, 1_000_000 - 4},
		}},
		{"its first instant", "acct_pro", "2026-02-28T05:00:00Z", "pro", "America/New_York", 31, []quotaRow{
			{"day", "2026-02-28T05:00:00Z", "2026-03-01T05:00:00Z", 1000, 12, 988},
			{"month", "2026-02-28T05:00:00Z", "2026-03-31T04:00:00Z", 1_000_000, 79, 1_000_000 - 79},
		}},
		{"March's period, after DST", "acct_pro", "2026-03-31T04:00:00Z", "pro", "America/New_York", 31, []quotaRow{
			{"day", "2026-03-31T04:00:00Z", "2026-04-01T04:00:00Z", 1000, 1000, 0},
			{"month", "2026-03-31T04:00:00Z", "2026-04-30T04:00:00Z", 1_000_000, 1000, 999_000},
		}},
		{"no assignment: the default plan, over its limit", "acct_unassigned", "2026-03-20T00:00:00Z", "default", "", 0, []quotaRow{
			{"month", "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z", 500, 800, 0},
		}},
		{"a plan without quotas", "acct_plain", "2026-03-20T00:00:00Z", "plain", "", 0, []quotaRow{}},
		{"assigned a plan the catalogue does not hold", "acct_missing", "2026-03-20T00:00:00Z", "missing", "", 0, []quotaRow{}},
		{"assigned a deleted plan", "acct_dropped", "2026-03-20T00:00:00Z", "dropped", "", 0, []quotaRow{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at, _ := time.Parse(time.RFC3339, tt.at)
			res, err := l.Quotas(ctx, billing.QuotaQuery{Key: tt.key, At: at})
			if err != nil {
				t.Fatal(err)
			}
			if res.Key != tt.key || res.Plan != tt.plan || res.TimeZone != tt.zone || res.AnchorDay != tt.anchor || !res.At.Equal(at) {
				t.Fatalf("result %+v, want plan %q zone %q anchor %d", res, tt.plan, tt.zone, tt.anchor)
			}
			if got := quotaRows(res); !slices.Equal(got, tt.rows) {
				t.Fatalf("quotas\n%+v\nwant\n%+v", got, tt.rows)
			}
		})
	}

	t.Run("no plan at all", func(t *testing.T) {
		if _, err := pool.Exec(ctx, `UPDATE quota_plans SET deleted = true, quotas = '[]', revision = revision + 100 WHERE name = 'default'`); err != nil {
			t.Fatal(err)
		}
		res, err := l.Quotas(ctx, billing.QuotaQuery{Key: "acct_unassigned", At: time.Now()})
		if err != nil || res.Plan != "" || len(res.Quotas) != 0 || res.Quotas == nil {
			t.Fatalf("%+v, %v; want no plan and an empty list", res, err)
		}
	})
}

// A quota's used is the quota base ledger/quotabase answers for the same
// key and period (pgledger's sum by region, added up): the limiters and
// billing agree.
func TestQuotaUsedIsQuotaBase(t *testing.T) {
	url, pool := seedQuotas(t)
	l, _ := newLedger(t, url, billing.DefaultConfig())
	bases := pgledger.New(pool)
	ctx := context.Background()
	for _, tc := range []struct{ key, at string }{
		{"acct_pro", "2026-03-15T12:30:00Z"}, {"acct_pro", "2026-02-28T04:59:59Z"}, {"acct_pro", "2026-02-28T05:00:00Z"},
		{"acct_pro", "2026-04-10T00:00:00Z"}, {"acct_unassigned", "2026-03-02T00:00:30Z"},
	} {
		at, _ := time.Parse(time.RFC3339, tc.at)
		res, err := l.Quotas(ctx, billing.QuotaQuery{Key: tc.key, At: at})
		if err != nil || len(res.Quotas) == 0 {
			t.Fatalf("%s at %s: %+v, %v", tc.key, tc.at, res, err)
		}
		for _, q := range res.Quotas {
			byRegion, err := bases.SpentByRegion(ctx, tc.key, q.Start, q.End)
			if err != nil {
				t.Fatal(err)
			}
			var base int64
			for _, v := range byRegion {
				base += v
			}
			if q.Used != base {
				t.Errorf("%s at %s, %s [%s, %s): used %d, quota base %d", tc.key, tc.at, q.Period, q.Start, q.End, q.Used, base)
			}
		}
	}
}

// scanned returns the usage_reports partitions an EXPLAIN ANALYZE JSON
// plan executed (runtime pruning leaves the others never executed).
func scanned(t *testing.T, plan []byte) []string {
	t.Helper()
	var doc []map[string]any
	if err := json.Unmarshal(plan, &doc); err != nil || len(doc) != 1 {
		t.Fatalf("plan %s: %v", plan, err)
	}
	var out []string
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		if r, ok := n["Relation Name"].(string); ok && strings.HasPrefix(r, "usage_reports") && !slices.Contains(out, r) {
			if loops, _ := n["Actual Loops"].(float64); loops > 0 {
				out = append(out, r)
			}
		}
		if kids, ok := n["Plans"].([]any); ok {
			for _, k := range kids {
				if m, ok := k.(map[string]any); ok {
					walk(m)
				}
			}
		}
	}
	root, ok := doc[0]["Plan"].(map[string]any)
	if !ok {
		t.Fatalf("plan %s has no Plan", plan)
	}
	walk(root)
	slices.Sort(out)
	return out
}

// Each quota's sum reads only the month partitions its period's bounds
// touch, by an index range on the key: a day in March reads March; the
// month from February 28th 05:00Z to March 31st 04:00Z reads February and
// March, never January or April.
func TestQuotaUsagePrunesPartitions(t *testing.T) {
	_, pool := seedQuotas(t)
	ctx := context.Background()
	var reps []ledger.Report
	for _, s := range []time.Time{time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC), time.Date(2026, 4, 10, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 5, 10, 0, 0, 0, 0, time.UTC)} {
		reps = append(reps, ledger.Report{Key: "acct_pro", WindowStart: s, WindowEnd: s.Add(time.Minute), ProcessID: "p1",
			Region: "eu", Spent: 1, Seq: 1, SentAt: s})
	}
	if _, err := reconcile.NewWriter(pool).Write(ctx, reps); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE usage_reports`); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 15, 12, 30, 0, 0, time.UTC)
	for _, mode := range []string{"auto", "force_generic_plan"} {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// A few rows make a sequential scan cheaper: forbid it to see
		// that the primary key serves the sum.
		if _, err := conn.Exec(ctx, `SET plan_cache_mode = `+mode+`; SET enable_seqscan = off`); err != nil {
			t.Fatal(err)
		}
		var plan []byte
		if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+billing.QuotaSQL, "acct_pro", at).Scan(&plan); err != nil {
			t.Fatal(err)
		}
		conn.Release()
		if got, want := scanned(t, plan), []string{"usage_reports_p202602", "usage_reports_p202603"}; !slices.Equal(got, want) {
			t.Errorf("plan_cache_mode %s: executed scans of %v, want %v; plan:\n%s", mode, got, want, plan)
		}
		if !strings.Contains(string(plan), `"Index Name": "usage_reports_p202603_pkey"`) {
			t.Errorf("plan_cache_mode %s: the sum does not use the primary key; plan:\n%s", mode, plan)
		}
	}
}

type fixedQuotas struct{ got billing.QuotaQuery }

func (f *fixedQuotas) Quotas(_ context.Context, q billing.QuotaQuery) (billing.QuotaResult, error) {
	f.got = q
	return billing.QuotaResult{Key: q.Key, At: q.At, Quotas: []billing.QuotaUsage{}}, nil
}

// The handler refuses what /v1/usage refuses, names the bad field, scopes
// a tenant's token to its prefix, and asks about now when at is absent.
func TestQuotaHandler(t *testing.T) {
	now := time.Date(2026, 3, 15, 12, 30, 0, 0, time.UTC)
	tenant, err := billing.NewAccess([]billing.Token{{Secret: tokA}, {Secret: "t42-0123456789abcdef", Prefix: "acct_42_"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		method string
		query  string
		auth   string
		access *billing.Access
		status int
		field  string
		at     time.Time // asked, for 200
	}{
		{"no token", "GET", "key=k", "", tenant, 401, "Authorization", time.Time{}},
		{"wrong token", "GET", "key=k", "Bearer " + tokA + "x", tenant, 403, "Authorization", time.Time{}},
		{"disabled", "GET", "key=k", "Bearer " + tokA, nil, 503, "", time.Time{}},
		{"POST", "POST", "key=k", "Bearer " + tokA, tenant, 405, "", time.Time{}},
		{"no key", "GET", "at=2026-03-01T00:00:00Z", "Bearer " + tokA, tenant, 400, "key", time.Time{}},
		{"key too long", "GET", "key=" + strings.Repeat("k", 600), "Bearer " + tokA, tenant, 400, "key", time.Time{}},
		{"bad at", "GET", "key=k&at=yesterday", "Bearer " + tokA, tenant, 400, "at", time.Time{}},
		{"at without a zone", "GET", "key=k&at=2026-03-01T00:00:00", "Bearer " + tokA, tenant, 400, "at", time.Time{}},
		{"tenant, another key", "GET", "key=acct_43_a", "Bearer t42-0123456789abcdef", tenant, 403, "key", time.Time{}},
		{"tenant, own key", "GET", "key=acct_42_a", "Bearer t42-0123456789abcdef", tenant, 200, "", now},
		{"no at: now", "GET", "key=k", "Bearer " + tokA, tenant, 200, "", now},
		{"at", "GET", "key=k&at=2026-02-01T10:00:00%2B01:00", "Bearer " + tokA, tenant, 200, "", time.Date(2026, 2, 1, 9, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fixedQuotas{}
			h := &billing.QuotaHandler{Ledger: f, Access: tt.access, Now: func() time.Time { return now }}
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(tt.method, "/v1/usage/quotas?"+tt.query, nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			h.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Fatalf("status %d %s, want %d", rec.Code, rec.Body, tt.status)
			}
			if tt.status == 200 {
				if !f.got.At.Equal(tt.at) {
					t.Fatalf("asked at %v, want %v", f.got.At, tt.at)
				}
				return
			}
			if f.got.Key != "" {
				t.Fatalf("a refused request reached the ledger: %+v", f.got)
			}
			if body := decodeError(t, rec.Body.Bytes()); body["error"] == "" || body["field"] != tt.field {
				t.Fatalf("body %v, want an error naming %q", body, tt.field)
			}
		})
	}
}

// Over HTTP on the real ledger: JSON as documented, and CSV.
func TestQuotaHandlerFromLedger(t *testing.T) {
	url, _ := seedQuotas(t)
	l, _ := newLedger(t, url, billing.DefaultConfig())
	srv := httptest.NewServer(&billing.QuotaHandler{Ledger: l, Access: testAccess(t)})
	defer srv.Close()
	resp := get(t, srv.URL+"/v1/usage/quotas?key=acct_pro&at=2026-03-15T12:30:00Z", "")
	body, _ := io.ReadAll(resp.Body)
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s (%v)", resp.StatusCode, body, err)
	}
	want := map[string]any{"key": "acct_pro", "plan": "pro", "time_zone": "America/New_York", "anchor_day": 31.0,
		"at": "2026-03-15T12:30:00Z", "quotas": []any{
			map[string]any{"period": "day", "start": "2026-03-15T04:00:00Z", "end": "2026-03-16T04:00:00Z", "limit": 1000.0, "used": 60.0, "remaining": 940.0},
			map[string]any{"period": "month", "start": "2026-02-28T05:00:00Z", "end": "2026-03-31T04:00:00Z", "limit": 1e6, "used": 79.0, "remaining": 999921.0},
		}}
	if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
		t.Fatalf("body\n%s\nwant\n%s", g, w)
	}
	resp = get(t, srv.URL+"/v1/usage/quotas?key=acct_pro&at=2026-03-15T12:30:00Z", "text/csv")
	csv, _ := io.ReadAll(resp.Body)
	wantCSV := "key,plan,time_zone,anchor_day,at,period,start,end,limit,used,remaining\n" +
		"acct_pro,pro,America/New_York,31,2026-03-15T12:30:00Z,day,2026-03-15T04:00:00Z,2026-03-16T04:00:00Z,1000,60,940\n" +
		"acct_pro,pro,America/New_York,31,2026-03-15T12:30:00Z,month,2026-02-28T05:00:00Z,2026-03-31T04:00:00Z,1000000,79,999921\n"
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/csv") || string(csv) != wantCSV {
		t.Fatalf("%s:\n%s\nwant:\n%s", ct, csv, wantCSV)
	}
	resp = get(t, srv.URL+"/v1/usage/quotas?key=acct_plain", "")
	body, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"plan": "plain"`) || !strings.Contains(string(body), `"quotas": []`) {
		t.Fatalf("a plan without quotas: %d %s", resp.StatusCode, body)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
