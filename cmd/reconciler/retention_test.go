package main

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quotaplatform/quota/internal/testserver"
)

// reconciler retention creates the coming months' partitions, detaches
// those older than --keep-months and prints them; a second run does nothing
// more; --keep-months is required.
func TestRetentionCommand(t *testing.T) {
	db := testserver.NewDatabase(t)
	setQuotaEnv(t, map[string]string{"QUOTA_POSTGRES": db})
	if err := run([]string{"migrate"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	now := time.Now().UTC()
	month := func(m int) string {
		return "usage_reports_p" + time.Date(now.Year(), now.Month()+time.Month(m), 1, 0, 0, 0, 0, time.UTC).Format("200601")
	}
	for _, m := range []int{-14, -13, -12} {
		at := time.Date(now.Year(), now.Month()+time.Month(m), 2, 0, 0, 0, 0, time.UTC)
		if _, err := conn.Exec(ctx, `SELECT usage_ensure_partition($1)`, at); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO usage_reports (key, window_start, process_id, window_end, region, spent, seq, sent_at)
			VALUES ('acct', $1, 'p1', $1::timestamptz + interval '1 minute', 'eu', 1, 1, $1)`, at); err != nil {
			t.Fatal(err)
		}
	}

	var out bytes.Buffer
	if err := run([]string{"retention", "--keep-months", "12", "--ahead-months", "5"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(out.String())
	if len(got) != 2 || !strings.HasPrefix(got[0], month(-14)+"_detached_") || !strings.HasPrefix(got[1], month(-13)+"_detached_") {
		t.Fatalf("detached %q, want the partitions of 14 and 13 months ago", got)
	}
	rows, err := conn.Query(ctx, `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'usage_reports'::regclass`)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []int{-12, 0, 5} {
		if !slices.Contains(parts, month(m)) {
			t.Fatalf("%s missing after retention: %v", month(m), parts)
		}
	}

	out.Reset()
	if err := run([]string{"retention", "--keep-months", "12"}, &out, io.Discard); err != nil || out.Len() != 0 {
		t.Fatalf("second run: %q, %v", out.String(), err)
	}
	if err := run([]string{"retention"}, &out, io.Discard); err == nil || !strings.Contains(err.Error(), "--keep-months") {
		t.Fatalf("without --keep-months: %v", err)
	}
}
