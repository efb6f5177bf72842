package sink_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The sink's own tables speak the vocabulary (ledger/README.md): the
// issue's key (allowed 247, charged 10, refunded 6: net and billed 251)
// is sent, refused once and acknowledged, and every row of every
// billing_sink_* table is read back by column name. The billed figure is
// named billed (billing_sink_events.billed, acked_billed); a column named
// spent or *_spent must hold the gross allowed cost, 247, as
// usage_reports.spent does. billing_sink_events.spent and acked_spent,
// which held 251 before migration 022, fail it. The event data the rows
// record (what the receiver was sent) names no figure spent at all: it
// sent the net as spent, and billed_delta as spent_delta, before this
// release.
func TestSinkTablesNameTheBilledFigure(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.writeNet(t, "acct_voc", "p1", time.Date(2026, 11, 10, 12, 0, 7, 0, time.UTC), 247, 6, 10)
	rc, s, name := httpSink(t)
	p := e.publisher(t, name, s)
	rc.down.Store(true) // a refusal, so the audit trail holds an answer too
	if _, err := p.Run(ctx, nov, dec, now); err == nil {
		t.Fatal("a run against a receiver that is down succeeded")
	}
	rc.down.Store(false)
	if st, err := p.Run(ctx, nov, dec, now); err != nil || st.Resent != 1 {
		t.Fatalf("run: %+v, %v", st, err)
	}

	rows, err := e.pool.Query(ctx, `SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 'billing\_sink%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{} // table.column of every figure named billed
	for _, table := range tables {
		rows, err := e.pool.Query(ctx, `SELECT to_jsonb(t)::text FROM `+pgx.Identifier{table}.Sanitize()+` t`)
		if err != nil {
			t.Fatal(err)
		}
		docs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range docs {
			var row map[string]any
			if err := json.Unmarshal([]byte(doc), &row); err != nil {
				t.Fatal(err)
			}
			for col, v := range row {
				if data, ok := v.(map[string]any); ok { // recorded event data
					for name, f := range data {
						if name == "spent" || strings.HasPrefix(name, "spent_") || strings.HasSuffix(name, "_spent") {
							t.Errorf("%s.%s names %s = %v: event data names no figure spent (net, allowed)", table, col, name, f)
						}
					}
				}
				n, isNumber := v.(float64)
				switch {
				case col == "spent" || strings.HasSuffix(col, "_spent"):
					if !isNumber || n != 247 {
						t.Errorf("%s.%s = %v: spent in a table is the gross allowed cost (247); the billed figure (251) is named billed",
							table, col, v)
					}
				case col == "billed" || strings.HasSuffix(col, "_billed"):
					seen[table+"."+col] = true
					if !isNumber || n != 251 {
						t.Errorf("%s.%s = %v, want the billed figure 251", table, col, v)
					}
				}
			}
		}
	}
	for _, col := range []string{"billing_sink_events.billed", "billing_sink_events.acked_billed", "billing_sink_audit.billed"} {
		if !seen[col] {
			t.Errorf("no %s after the run: the billed figure has another name", col)
		}
	}
}
