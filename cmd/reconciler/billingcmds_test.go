package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// export, events and sinks-report against a migrated database: the export
// prints every key of the month, events posts each closed period once,
// sinks-report shows no difference afterwards; bad flags name themselves.
func TestBillingCommands(t *testing.T) {
	db := testserver.NewDatabase(t)
	setQuotaEnv(t, map[string]string{"QUOTA_POSTGRES": db})
	if err := run([]string{"migrate"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	at := time.Date(2026, 11, 5, 10, 0, 0, 0, time.UTC)
	var reps []ledger.Report
	for _, k := range []string{"acct_b", "acct_a"} {
		reps = append(reps, ledger.Report{Key: k, WindowStart: at, WindowEnd: at.Add(time.Minute), ProcessID: "p1",
			Region: "eu", Spent: 11, Final: true, Seq: 1, SentAt: at})
	}
	if _, err := reconcile.NewWriter(pool).Write(ctx, reps); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	if err := run([]string{"export", "--month", "2026-11", "--format", "csv"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[1], "acct_a,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,month,11,0,0,1,true,") ||
		!strings.HasPrefix(lines[2], "acct_b,") || lines[3] != "#end,2" {
		t.Fatalf("export:\n%s", out.String())
	}

	var mu sync.Mutex
	ids := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ev struct{ ID string }
		_ = json.NewDecoder(r.Body).Decode(&ev)
		mu.Lock()
		ids[ev.ID]++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	metrics := filepath.Join(t.TempDir(), "events.prom")
	for range 2 {
		if err := run([]string{"events", "--sink", srv.URL, "--month", "2026-11", "--metrics-file", metrics}, io.Discard, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	if len(ids) != 2 || ids[""] != 0 {
		t.Fatalf("events received: %v, want 2 distinct, each once", ids)
	}
	for id, n := range ids {
		if n != 1 {
			t.Fatalf("event %s received %d times", id, n)
		}
	}
	mu.Unlock()
	prom, err := os.ReadFile(metrics)
	if err != nil || !strings.Contains(string(prom), `quota_billing_sink_difference{sink="`+srv.URL+`"} 0`) {
		t.Fatalf("metrics file: %s %v", prom, err)
	}
	out.Reset()
	if err := run([]string{"sinks-report", "--month", "2026-11"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if want := srv.URL + ",2026-11-01T00:00:00Z,22,22,22,0,0"; !strings.Contains(out.String(), want) {
		t.Fatalf("sinks-report:\n%s\nwant a line %q", out.String(), want)
	}

	for _, tt := range []struct {
		args []string
		flag string
	}{
		{[]string{"export", "--month", "11/2026"}, "--month"},
		{[]string{"export", "--month", "2026-11", "--format", "xml"}, "--format"},
		{[]string{"export", "--month", "2026-11", "--granularity", "hour"}, "--granularity"},
		{[]string{"events", "--month", "2026-11"}, "--sink"},
		{[]string{"events", "--month", "2026-11", "--sink", "ftp://x"}, "--sink"},
	} {
		if err := run(tt.args, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), tt.flag) {
			t.Errorf("%q: %v, want an error naming %s", tt.args, err, tt.flag)
		}
	}
}
