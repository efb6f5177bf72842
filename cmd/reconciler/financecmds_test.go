package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// audit, preview and statement against a migrated database: a statement
// of the customer's key and its total, a preview of the first event
// stripe-sync would send (and nothing recorded), the audit trail of a
// period an events run sent; bad flags name themselves.
func TestFinanceCommands(t *testing.T) {
	db := migratedDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// A month long past on any machine running this, so it is complete.
	at := time.Date(2025, 11, 5, 10, 0, 0, 0, time.UTC)
	rep := ledger.Report{Key: "acct_a", WindowStart: at, WindowEnd: at.Add(time.Minute), ProcessID: "p1", Region: "eu",
		Spent: 11, Charged: 2, Refunded: 3, Final: true, Seq: 1, SentAt: at}
	if _, err := reconcile.NewWriter(pool).Write(ctx, []ledger.Report{rep}); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"stripe-customer", "set", "--key", "acct_a", "--customer", "cus_A"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	if err := run([]string{"statement", "--customer", "cus_A", "--month", "2025-11"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "customer,key,period_start,period_end,allowed,charged,refunded,net,billed,complete\n"+
		"cus_A,acct_a,2025-11-01T00:00:00Z,2025-12-01T00:00:00Z,11,2,3,10,10,true\n"+
		"cus_A,#total,2025-11-01T00:00:00Z,2025-12-01T00:00:00Z,11,2,3,10,10,\n"; got != want {
		t.Errorf("statement:\n%s\nwant:\n%s", got, want)
	}

	out.Reset()
	if err := run([]string{"preview", "--meter", "api_calls", "--month", "2025-11", "--format", "json"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var planned []struct {
		Customer, Key, Kind string
		Value               int64
	}
	if err := json.Unmarshal(out.Bytes(), &planned); err != nil || len(planned) != 1 ||
		planned[0].Customer != "cus_A" || planned[0].Kind != "first" || planned[0].Value != 10 {
		t.Errorf("preview: %s (%v); want acct_a's first event, 10 to cus_A", out.String(), err)
	}
	var recorded int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM billing_sink_events) + (SELECT count(*) FROM billing_sinks)`).
		Scan(&recorded); err != nil || recorded != 0 {
		t.Errorf("after a preview: %d sink rows (%v), want none", recorded, err)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	defer srv.Close()
	if err := run([]string{"events", "--sink", srv.URL, "--month", "2025-11"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run([]string{"audit", "--key", "acct_a", "--month", "2025-11"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], ",request,pending,10,0,0,") || !strings.Contains(lines[2], ",answer,sent,10,10,1,") {
		t.Errorf("audit:\n%s", out.String())
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"statement", "--customer", "acct_a", "--month", "2025-11"}, "--customer"},
		{[]string{"statement", "--customer", "cus_A", "--month", "November"}, "--month"},
		{[]string{"audit", "--month", "2025-11"}, "--key"},
		{[]string{"audit", "--key", "acct_a", "--month", "2025-11", "--format", "xml"}, "--format"},
		{[]string{"preview", "--month", "2025-11"}, "--meter"},
		{[]string{"preview", "--meter", "m", "--month", "2025-11", "--continuous"}, "--month"},
	} {
		err := run(tt.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error naming %s", tt.args, err, tt.want)
		}
	}
}
