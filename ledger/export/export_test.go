package export_test

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

const (
	tokAll    = "all-0123456789abcdef"
	tokTenant = "t42-0123456789abcdef"
)

// now is after November 2026 ends: its periods can be complete.
var now = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

// serve starts a Handler on the database's billing pool with tokens
// tokAll (every key) and tokTenant (keys acct_42_…).
func serve(t testing.TB, url string, cfg export.Config) *httptest.Server {
	t.Helper()
	pool, err := billing.NewPool(url, billing.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ex, err := export.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := billing.ParseTokens(tokAll + ",prefix:acct_42_=" + tokTenant)
	if err != nil {
		t.Fatal(err)
	}
	access, err := billing.NewAccess(tokens)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&export.Handler{Exporter: ex, Access: access, Now: func() time.Time { return now }})
	t.Cleanup(srv.Close)
	return srv
}

func get(t testing.TB, srv *httptest.Server, token, query, accept string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/usage/export?"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
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

// line is an NDJSON line: a row, or the end or error line.
type line struct {
	export.Row
	Granularity string `json:"granularity"`
	Cursor      string `json:"cursor"`
	End         bool   `json:"end"`
	Rows        int64  `json:"rows"`
	Error       string `json:"error"`
}

// readNDJSON returns an NDJSON export's rows and asserts its end line.
func readNDJSON(t testing.TB, resp *http.Response) []line {
	t.Helper()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var rows []line
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if l.End {
			if l.Rows != int64(len(rows)) || sc.Scan() {
				t.Fatalf("end line says %d rows after %d, or a line follows it", l.Rows, len(rows))
			}
			return rows
		}
		if l.Error != "" {
			t.Fatalf("export failed: %+v", l)
		}
		rows = append(rows, l)
	}
	t.Fatalf("no end line after %d rows (%v)", len(rows), sc.Err())
	return nil
}

// seed writes usage: acct_1 in two November days (the second incomplete:
// p2 never sent its final), acct_42_a (degraded), acct_42_b, #hash (a key
// that starts like the CSV end line), and rows outside November.
func seed(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	var reps []ledger.Report
	add := func(key string, start time.Time, proc string, spent, rejected, degraded int64, final bool) {
		reps = append(reps, ledger.Report{Key: key, WindowStart: start, WindowEnd: start.Add(time.Minute),
			ProcessID: proc, Region: "eu", Spent: spent, Rejected: rejected, Degraded: degraded, Final: final, Seq: 1, SentAt: start})
	}
	d1 := time.Date(2026, 11, 3, 10, 0, 17, 0, time.UTC)
	d2 := time.Date(2026, 11, 4, 23, 59, 17, 0, time.UTC)
	add("acct_1", d1, "p1", 10, 1, 0, true)
	add("acct_1", d1, "p2", 5, 0, 0, true)
	add("acct_1", d1.Add(time.Minute), "p1", 7, 0, 0, true)
	add("acct_1", d2, "p1", 3, 2, 0, true)
	add("acct_1", d2, "p2", 4, 0, 0, false)
	add("acct_42_a", d1, "p1", 20, 0, 6, true)
	add("acct_42_b", d2, "p1", 1, 0, 0, true)
	add("#hash,x", d1, "p1", 2, 0, 0, true)
	add("acct_1", time.Date(2026, 10, 31, 23, 59, 0, 0, time.UTC), "p1", 1000, 0, 0, true)
	add("acct_9", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), "p1", 1000, 0, 0, true)
	if _, err := reconcile.NewWriter(pool).Write(context.Background(), reps); err != nil {
		t.Fatal(err)
	}
}

type want struct {
	key, start                         string
	spent, rejected, degraded, windows int64
	complete                           bool
}

func got(rows []line) []want {
	var out []want
	for _, r := range rows {
		out = append(out, want{r.Key, r.PeriodStart.Format(time.DateOnly), r.Allowed, r.Rejected, r.Degraded, r.Windows, r.Complete})
	}
	return out
}

func TestExportRows(t *testing.T) {
	url, pool := ledgertest.Database(t)
	seed(t, pool)
	srv := serve(t, url, export.DefaultConfig())
	tests := []struct {
		name, token, query string
		want               []want
	}{
		{"month", tokAll, "from=2026-11&to=2026-12&granularity=month", []want{
			{"#hash,x", "2026-11-01", 2, 0, 0, 1, true},
			{"acct_1", "2026-11-01", 29, 3, 0, 3, false},
			{"acct_42_a", "2026-11-01", 20, 0, 6, 1, true},
			{"acct_42_b", "2026-11-01", 1, 0, 0, 1, true}}},
		{"day", tokAll, "from=2026-11-01&to=2026-12-01T00:00:00Z&granularity=day", []want{
			{"#hash,x", "2026-11-03", 2, 0, 0, 1, true},
			{"acct_1", "2026-11-03", 22, 1, 0, 2, true},
			{"acct_1", "2026-11-04", 7, 2, 0, 1, false},
			{"acct_42_a", "2026-11-03", 20, 0, 6, 1, true},
			{"acct_42_b", "2026-11-04", 1, 0, 0, 1, true}}},
		{"scoped token sees its keys only", tokTenant, "from=2026-11&to=2026-12&format=ndjson", []want{
			{"acct_42_a", "2026-11-01", 20, 0, 6, 1, true},
			{"acct_42_b", "2026-11-01", 1, 0, 0, 1, true}}},
		{"after a key", tokAll, "from=2026-11&to=2026-12&after=acct_1", []want{
			{"acct_42_a", "2026-11-01", 20, 0, 6, 1, true},
			{"acct_42_b", "2026-11-01", 1, 0, 0, 1, true}}},
		{"scoped, after a key before its prefix", tokTenant, "from=2026-11&to=2026-12&after=a", []want{
			{"acct_42_a", "2026-11-01", 20, 0, 6, 1, true},
			{"acct_42_b", "2026-11-01", 1, 0, 0, 1, true}}},
		{"scoped, after its last key", tokTenant, "from=2026-11&to=2026-12&after=acct_42_b", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows := readNDJSON(t, get(t, srv, tt.token, tt.query, ""))
			if g := got(rows); !slices.Equal(g, tt.want) {
				t.Fatalf("rows\n%+v\nwant\n%+v", g, tt.want)
			}
		})
	}
	t.Run("hour", func(t *testing.T) {
		rows := readNDJSON(t, get(t, srv, tokAll, "from=2026-11-03T10:00:00Z&to=2026-11-05&granularity=hour", ""))
		type hourRow struct {
			key, start, end, granularity string
			spent, rejected, windows     int64
			complete                     bool
		}
		var g []hourRow
		for _, r := range rows {
			g = append(g, hourRow{r.Key, r.PeriodStart.Format(time.RFC3339), r.PeriodEnd.Format(time.RFC3339), r.Granularity,
				r.Allowed, r.Rejected, r.Windows, r.Complete})
		}
		want := []hourRow{
			{"#hash,x", "2026-11-03T10:00:00Z", "2026-11-03T11:00:00Z", "hour", 2, 0, 1, true},
			{"acct_1", "2026-11-03T10:00:00Z", "2026-11-03T11:00:00Z", "hour", 22, 1, 2, true},
			{"acct_1", "2026-11-04T23:00:00Z", "2026-11-05T00:00:00Z", "hour", 7, 2, 1, false},
			{"acct_42_a", "2026-11-03T10:00:00Z", "2026-11-03T11:00:00Z", "hour", 20, 0, 1, true},
			{"acct_42_b", "2026-11-04T23:00:00Z", "2026-11-05T00:00:00Z", "hour", 1, 0, 1, true}}
		if !slices.Equal(g, want) {
			t.Fatalf("rows\n%+v\nwant\n%+v", g, want)
		}
	})
	t.Run("a period not over is not complete", func(t *testing.T) {
		h := serve(t, url, export.DefaultConfig())
		h.Config.Handler.(*export.Handler).Now = func() time.Time { return time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC) }
		rows := readNDJSON(t, get(t, h, tokAll, "from=2026-11&to=2026-12", ""))
		for _, r := range rows {
			if r.Complete {
				t.Fatalf("%+v complete before November ends", r)
			}
		}
	})
	t.Run("csv", func(t *testing.T) {
		resp := get(t, srv, tokAll, "from=2026-11&to=2026-12&granularity=month", "text/csv")
		b, _ := io.ReadAll(resp.Body)
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if resp.Header.Get("Content-Type") != "text/csv; charset=utf-8" || len(lines) != 6 ||
			lines[0] != export.CSVHeader || lines[5] != "#end,4" || !strings.HasPrefix(lines[1], `"#hash,x",2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,month,2,0,0,1,true,`) {
			t.Fatalf("csv:\n%s", b)
		}
		r := csv.NewReader(strings.NewReader(string(b)))
		r.Comment = '#'
		recs, err := r.ReadAll()
		if err != nil || len(recs) != 5 || recs[1][0] != "#hash,x" || recs[2][0] != "acct_1" || recs[2][8] != "false" {
			t.Fatalf("csv.Reader with Comment '#': %q, %v", recs, err)
		}
	})
}

func TestExportRefusals(t *testing.T) {
	url, _ := ledgertest.Database(t)
	srv := serve(t, url, export.DefaultConfig())
	const rng = "from=2026-11&to=2026-12"
	tests := []struct {
		name, token, query string
		status             int
		field              string
	}{
		{"no token", "", rng, 401, "Authorization"},
		{"wrong token", tokAll + "x", rng, 403, "Authorization"},
		{"no from", tokAll, "to=2026-12", 400, "from"},
		{"bad from", tokAll, "from=yesterday&to=2026-12", 400, "from"},
		{"from not a period start", tokAll, "from=2026-11-02&to=2026-12", 400, "from"},
		{"day from not midnight", tokAll, "from=2026-11-02T01:00:00Z&to=2026-11-03&granularity=day", 400, "from"},
		{"no to", tokAll, "from=2026-11", 400, "to"},
		{"to before from", tokAll, "from=2026-11&to=2026-10", 400, "to"},
		{"too long", tokAll, "from=2026-01-01&to=2027-03-01&granularity=day", 400, "to"},
		{"granularity", tokAll, rng + "&granularity=week", 400, "granularity"},
		{"hour from not an hour start", tokAll, "from=2026-11-02T01:30:00Z&to=2026-11-03&granularity=hour", 400, "from"},
		{"31 days of hours", tokAll, "from=2026-11-01&to=2026-12-02&granularity=hour&format=xml", 400, "format"},
		{"more than 31 days of hours", tokAll, "from=2026-11-01&to=2026-12-02T01:00:00Z&granularity=hour", 400, "to"},
		{"format", tokAll, rng + "&format=xml", 400, "format"},
		{"bad cursor", tokAll, rng + "&cursor=zzz", 400, "cursor"},
		{"after and cursor", tokAll, rng + "&after=a&cursor=" + (export.Cursor{Key: "a", PeriodStart: now}).String(), 400, "cursor"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := get(t, srv, tt.token, tt.query, "")
			var body map[string]string
			_ = json.NewDecoder(resp.Body).Decode(&body)
			if resp.StatusCode != tt.status || body["field"] != tt.field || body["error"] == "" {
				t.Fatalf("%d %v, want %d naming %q", resp.StatusCode, body, tt.status, tt.field)
			}
		})
	}
}

// Resuming from the cursor of any row gives exactly the rows after it,
// across page boundaries (pages of 3 rows).
func TestExportResume(t *testing.T) {
	url, pool := ledgertest.Database(t)
	var reps []ledger.Report
	for k := range 7 {
		for d := range k % 3 * 2 { // 0, 2 or 4 days
			start := time.Date(2026, 11, 1+d, 12, 0, 0, 0, time.UTC)
			reps = append(reps, ledger.Report{Key: fmt.Sprintf("k%02d", k), WindowStart: start, WindowEnd: start.Add(time.Minute),
				ProcessID: "p", Region: "eu", Spent: int64(k*10 + d), Final: true, Seq: 1, SentAt: start})
		}
	}
	if _, err := reconcile.NewWriter(pool).Write(context.Background(), reps); err != nil {
		t.Fatal(err)
	}
	cfg := export.DefaultConfig()
	cfg.PageRows = 3
	srv := serve(t, url, cfg)
	const rng = "from=2026-11-01&to=2026-11-06&granularity=day"
	all := readNDJSON(t, get(t, srv, tokAll, rng, ""))
	if len(all) != len(reps) {
		t.Fatalf("%d rows, want %d", len(all), len(reps))
	}
	for i := range all {
		rest := readNDJSON(t, get(t, srv, tokAll, rng+"&cursor="+url2(all[i].Cursor), ""))
		if g, w := got(rest), got(all[i+1:]); !slices.Equal(g, w) {
			t.Fatalf("resumed after row %d (%s %s): %+v, want %+v", i, all[i].Key, all[i].PeriodStart, g, w)
		}
	}
	rest := readNDJSON(t, get(t, srv, tokAll, rng+"&after=k02", ""))
	if len(rest) == 0 || rest[0].Key != "k04" || got(rest)[0] != got(all)[slices.IndexFunc(all, func(l line) bool { return l.Key == "k04" })] {
		t.Fatalf("after=k02: %+v", got(rest))
	}
}

func url2(s string) string { return url.QueryEscape(s) }

// An export of 100,000 keys streams in bounded memory: the live heap while
// the body is read grows by far less than the rows would take if they
// were buffered.
func TestExportConstantMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 keys")
	}
	const keys = 100_000
	url, pool := ledgertest.Database(t)
	ctx := context.Background()
	start := time.Date(2026, 11, 5, 0, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(ctx, `SELECT usage_ensure_partition($1)`, start); err != nil {
		t.Fatal(err)
	}
	_, err := pool.CopyFrom(ctx, pgx.Identifier{"usage_reports"},
		[]string{"key", "window_start", "process_id", "window_end", "region", "spent", "final", "seq", "sent_at"},
		pgx.CopyFromFunc(func() func() ([]any, error) {
			i := 0
			return func() ([]any, error) {
				if i == keys {
					return nil, nil
				}
				i++
				return []any{fmt.Sprintf("acct_%07d", i), start, "p1", start.Add(time.Minute), "eu", int64(i), true, int64(1), start}, nil
			}
		}()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE usage_reports"); err != nil {
		t.Fatal(err)
	}
	cfg := export.DefaultConfig()
	// At a load average of 25 a page's query ran past the default 5 s and
	// the export ended with its error line after 30,000 rows: this test is
	// about memory, and no healthy page comes near a minute.
	cfg.StatementTimeout = time.Minute
	srv := serve(t, url, cfg)

	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	before := heap()
	began := time.Now()
	resp := get(t, srv, tokAll, "from=2026-11&to=2026-12", "")
	sc := bufio.NewScanner(resp.Body)
	var rows, bytes int64
	var peak uint64
	var last string
	for sc.Scan() {
		bytes += int64(len(sc.Bytes())) + 1
		if strings.HasPrefix(sc.Text(), `{"end":true`) || strings.HasPrefix(sc.Text(), `{"error":`) {
			last = sc.Text() // an error line is shown in the failure
			break
		}
		rows++
		if rows%10_000 == 0 {
			peak = max(peak, heap())
		}
	}
	elapsed := time.Since(began)
	if rows != keys || last != fmt.Sprintf(`{"end":true,"rows":%d}`, keys) {
		t.Fatalf("%d rows, last line %q", rows, last)
	}
	grew := int64(peak) - int64(before)
	// Buffering the rows would hold at least their output (and Row
	// values, ~100 bytes each): over 10 MB. One page is 10,000 rows, and
	// with the carry-over a page also reads its keys' earlier periods:
	// +1.8 MiB alone, up to +4.4 MiB seen beside other packages' tests.
	const bound = 6 << 20
	t.Logf("export of %d keys: %d bytes in %v (%.0f rows/s); heap in use %d KiB before, peak %d KiB during (+%d KiB)",
		keys, bytes, elapsed, float64(rows)/elapsed.Seconds(), before>>10, peak>>10, grew>>10)
	if bytes < 5*bound || grew > bound {
		t.Fatalf("heap grew by %d bytes during the export (bound %d); the body was %d bytes", grew, bound, bytes)
	}
}
