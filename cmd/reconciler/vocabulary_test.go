package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// reconciler usage and reconciler export name the figures of one key
// alike (issue 36's key: allowed 247, charged 10, refunded 6, net 251),
// and neither has a column or field named spent: usage's was the net
// until this release, export's the gross allowed cost before that.
func TestUsageAndExportNameTheFiguresAlike(t *testing.T) {
	db := migratedDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	at := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
	if _, err := reconcile.NewWriter(pool).Write(ctx, []ledger.Report{{Key: "acct_v", WindowStart: at, WindowEnd: at.Add(time.Minute),
		ProcessID: "p1", Region: "eu", Spent: 247, Leased: 247, Charged: 10, Refunded: 6, Final: true, Seq: 1, SentAt: at}}); err != nil {
		t.Fatal(err)
	}
	columns := func(args ...string) map[string]string {
		var out bytes.Buffer
		if err := run(args, &out, io.Discard); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		cr := csv.NewReader(&out)
		cr.Comment = '#'
		recs, err := cr.ReadAll()
		if err != nil || len(recs) < 2 {
			t.Fatalf("%v: %q %v", args, recs, err)
		}
		m := map[string]string{}
		for i, name := range recs[0] {
			m[name] = recs[1][i]
		}
		return m
	}
	usageArgs := []string{"usage", "--key", "acct_v", "--from", "2026-11-05T00:00:00Z", "--to", "2026-11-06T00:00:00Z", "--granularity", "day"}
	var usageJSON struct{ Totals map[string]int64 }
	var out bytes.Buffer
	if err := run(append(usageArgs, "--format", "json"), &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(out.Bytes(), &usageJSON); err != nil {
		t.Fatal(err)
	}
	usageJSONCols := map[string]string{}
	for k, v := range usageJSON.Totals {
		usageJSONCols[k] = strconv.FormatInt(v, 10)
	}
	for _, c := range []struct {
		surface string
		cols    map[string]string
	}{
		{"usage --format json", usageJSONCols},
		{"usage --format csv", columns(append(usageArgs, "--format", "csv")...)},
		{"export --format csv", columns("export", "--month", "2026-11", "--format", "csv")},
	} {
		for name, want := range map[string]string{"allowed": "247", "charged": "10", "refunded": "6", "net": "251"} {
			if c.cols[name] != want {
				t.Errorf("%s: %s = %q, want %s", c.surface, name, c.cols[name], want)
			}
		}
		for name, v := range c.cols {
			if name == "spent" || strings.HasPrefix(name, "spent_") || strings.HasSuffix(name, "_spent") {
				t.Errorf("%s: %s = %s: no billing figure is named spent (net is what is billed, allowed the gross)", c.surface, name, v)
			}
		}
	}
}
