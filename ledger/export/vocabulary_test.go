package export_test

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/ledger/sink"
)

// csvColumns reads a CSV answer's header and its first line as a map.
func csvColumns(t *testing.T, body string) map[string]string {
	t.Helper()
	cr := csv.NewReader(strings.NewReader(body))
	cr.Comment = '#'
	cr.FieldsPerRecord = -1
	recs, err := cr.ReadAll()
	if err != nil || len(recs) < 2 {
		t.Fatalf("csv %q: %v", body, err)
	}
	out := map[string]string{}
	for i, name := range recs[0] {
		out[name] = recs[1][i]
	}
	return out
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b.String())
	}
	return b.String()
}

// vocabulary is the one list of billing names (ledger/README.md,
// Vocabulary) with the key's figures: every surface names them
// so. billed is on the surfaces that bill (the export and the sinks).
var vocabulary = map[string]int64{"allowed": 247, "charged": 10, "refunded": 6, "net": 251}

// cloudEventData sends the month of November 2026 through the CloudEvents
// sink to a real HTTP receiver and returns the first event's data as sent.
func cloudEventData(t *testing.T, pool *pgxpool.Pool) map[string]any {
	t.Helper()
	var mu sync.Mutex
	var data []byte
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		data = ev.Data()
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(rcv.Close)
	snd, err := sink.NewHTTP(rcv.URL, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := export.New(pool, export.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	p, err := sink.NewPublisher(pool, ex, snd, sink.Config{Sink: rcv.URL})
	if err != nil {
		t.Fatal(err)
	}
	nov := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	if st, err := p.Run(context.Background(), nov, nov.AddDate(0, 1, 0), nov.AddDate(0, 2, 0)); err != nil || st.Sent != 1 {
		t.Fatalf("sink run: %+v, %v", st, err)
	}
	mu.Lock()
	defer mu.Unlock()
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("event data %s: %v", data, err)
	}
	return out
}

// viewColumns is the first row of a ledger view for the key, by
// column name.
func viewColumns(t *testing.T, pool *pgxpool.Pool, view string) map[string]any {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT * FROM `+view+` WHERE key = 'acct_voc' LIMIT 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if !rows.Next() {
		t.Fatalf("%s: no row (%v)", view, rows.Err())
	}
	vals, err := rows.Values()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	for i, f := range rows.FieldDescriptions() {
		if n, ok := vals[i].(int64); ok {
			out[f.Name] = float64(n)
		}
	}
	return out
}

// spentName reports whether a surface's field or column name is spent or
// one made of it (previous_spent, spent_delta): a billing surface names
// no figure so (ledger/README.md, Vocabulary).
func spentName(name string) bool {
	return name == "spent" || strings.HasPrefix(name, "spent_") || strings.HasSuffix(name, "_spent")
}

// One vocabulary on every surface (issue 36): for the key
// (allowed 247, charged 10, refunded 6) GET /v1/usage and GET
// /v1/usage/export, in JSON and CSV, the CloudEvents sink's event data
// and the ledger's views name allowed, charged, refunded and net alike
// (vocabulary), the surfaces that bill name billed, and none names a
// figure spent: it was the net on /v1/usage, the views and CloudEvent data
// and the gross allowed cost in the export before. spent is left only in
// the limiters' wire report and usage_reports, where it is the gross
// allowed cost, the surfaces' allowed.
func TestBillingFiguresHaveOneNameOnEveryEndpoint(t *testing.T) {
	url, pool := ledgertest.Database(t)
	start := time.Date(2026, 11, 10, 12, 0, 7, 0, time.UTC)
	report := ledger.Report{Key: "acct_voc", WindowStart: start, WindowEnd: start.Add(time.Minute), ProcessID: "p1", Region: "eu",
		Spent: 247, Leased: 250, Charged: 10, Refunded: 6, Final: true, Seq: 1, SentAt: start}
	if _, err := reconcile.NewWriter(pool).Write(context.Background(), []ledger.Report{report}); err != nil {
		t.Fatal(err)
	}
	// Where spent is left it is the gross allowed cost: in the report as
	// the limiter sends it, and in the ledger's table.
	wire, err := json.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	var wireFields map[string]any
	if err := json.Unmarshal(wire, &wireFields); err != nil {
		t.Fatal(err)
	}
	var tableSpent int64
	if err := pool.QueryRow(context.Background(), `SELECT sum(spent)::bigint FROM usage_reports WHERE key = 'acct_voc'`).
		Scan(&tableSpent); err != nil {
		t.Fatal(err)
	}
	if wireFields["spent"] != float64(vocabulary["allowed"]) || tableSpent != vocabulary["allowed"] {
		t.Errorf("wire report spent %v, usage_reports.spent %d: want the gross allowed cost %d", wireFields["spent"], tableSpent,
			vocabulary["allowed"])
	}

	exp := serve(t, url, export.DefaultConfig())
	bpool, err := billing.NewPool(url, billing.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bpool.Close)
	led, err := billing.NewLedger(bpool, billing.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := billing.ParseTokens(tokAll)
	if err != nil {
		t.Fatal(err)
	}
	access, err := billing.NewAccess(tokens)
	if err != nil {
		t.Fatal(err)
	}
	usage := httptest.NewServer(&billing.Handler{Ledger: led, Access: access})
	t.Cleanup(usage.Close)
	usageGet := func(accept string) string {
		req, _ := http.NewRequest(http.MethodGet, usage.URL+"/v1/usage?key=acct_voc&from=2026-11-10T00:00:00Z&to=2026-11-11T00:00:00Z&granularity=day", nil)
		req.Header.Set("Authorization", "Bearer "+tokAll)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return readBody(t, resp)
	}

	for _, c := range []struct {
		surface string
		figures func() map[string]any
		bills   bool // names billed
	}{
		{"/v1/usage JSON totals", func() map[string]any {
			var res struct{ Totals map[string]any }
			if err := json.Unmarshal([]byte(usageGet("")), &res); err != nil {
				t.Fatal(err)
			}
			return res.Totals
		}, false},
		{"/v1/usage JSON row", func() map[string]any {
			var res struct{ Rows []map[string]any }
			if err := json.Unmarshal([]byte(usageGet("")), &res); err != nil || len(res.Rows) != 1 {
				t.Fatalf("rows %v: %v", res.Rows, err)
			}
			return res.Rows[0]
		}, false},
		{"/v1/usage CSV", func() map[string]any {
			out := map[string]any{}
			for k, v := range csvColumns(t, usageGet("text/csv")) {
				out[k] = v
			}
			return out
		}, false},
		{"/v1/usage/export NDJSON", func() map[string]any {
			var row map[string]any
			body := readBody(t, get(t, exp, tokAll, "from=2026-11&to=2026-12&granularity=month", "application/x-ndjson"))
			if err := json.Unmarshal([]byte(strings.SplitN(body, "\n", 2)[0]), &row); err != nil {
				t.Fatal(err)
			}
			return row
		}, true},
		{"/v1/usage/export CSV", func() map[string]any {
			out := map[string]any{}
			for k, v := range csvColumns(t, readBody(t, get(t, exp, tokAll, "from=2026-11&to=2026-12&granularity=month", "text/csv"))) {
				out[k] = v
			}
			return out
		}, true},
		{"CloudEvent data", func() map[string]any { return cloudEventData(t, pool) }, true},
		{"view usage_windows", func() map[string]any { return viewColumns(t, pool, "usage_windows") }, false},
		{"view usage_by_hour", func() map[string]any { return viewColumns(t, pool, "usage_by_hour") }, false},
		{"view usage_by_day", func() map[string]any { return viewColumns(t, pool, "usage_by_day") }, false},
	} {
		t.Run(c.surface, func(t *testing.T) {
			got := c.figures()
			want := maps.Clone(vocabulary)
			if c.bills {
				want["billed"] = 251
			}
			for name, n := range want {
				if v, ok := got[name]; !ok || (v != float64(n) && v != strconv.FormatInt(n, 10)) {
					t.Errorf("%s = %v (present %v), want %d", name, v, ok, n)
				}
			}
			for name, v := range got {
				if spentName(name) {
					t.Errorf("%s = %v: a billing surface names no figure spent (net is what is billed, allowed the gross)", name, v)
				}
			}
		})
	}
	if !slices.Contains(strings.Split(export.CSVHeader, ","), "allowed") || slices.ContainsFunc(strings.Split(export.CSVHeader, ","), spentName) {
		t.Fatalf("export CSV header %q", export.CSVHeader)
	}
}
