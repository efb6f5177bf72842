package billing_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/quotaplatform/quota/ledger/billing"
)

func TestBuckets(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		from, to string
		g        billing.Granularity
		window   time.Duration
		want     int64
	}{
		{"2026-03-01T10:00:00Z", "2026-03-01T11:00:00Z", billing.Hour, 0, 1},
		{"2026-03-01T10:00:00Z", "2026-03-01T11:00:00.000000001Z", billing.Hour, 0, 2},
		{"2026-03-01T10:30:00Z", "2026-03-01T11:30:00Z", billing.Hour, 0, 2},
		{"2026-03-01T10:30:00+02:00", "2026-03-01T10:40:00+02:00", billing.Hour, 0, 1},
		{"2026-03-01T00:00:00Z", "2027-03-01T00:00:00Z", billing.Hour, 0, 8760},
		{"2026-03-01T00:00:00Z", "2026-03-02T00:00:00Z", billing.Day, 0, 1},
		{"2026-03-01T23:00:00Z", "2026-03-02T01:00:00Z", billing.Day, 0, 2},
		{"2026-03-01T23:00:00-02:00", "2026-03-02T00:30:00-02:00", billing.Day, 0, 1}, // 01:00–02:30 UTC on the 2nd
		{"2026-03-01T00:00:00Z", "2026-03-01T01:00:00Z", billing.Window, time.Minute, 60},
		{"2026-03-01T00:00:00Z", "2026-03-01T01:00:01Z", billing.Window, time.Minute, 61},
		{"2026-03-01T00:00:00Z", "2026-03-01T01:00:00Z", billing.Window, 10 * time.Second, 360},
	}
	for _, tt := range tests {
		q := billing.Query{Key: "k", From: at(tt.from), To: at(tt.to), Granularity: tt.g}
		if got := q.Buckets(tt.window); got != tt.want {
			t.Errorf("%s..%s %s window %v: %d buckets, want %d", tt.from, tt.to, tt.g, tt.window, got, tt.want)
		}
	}
}

// A query over the row limit is refused with 400 naming "to": counted
// before the query runs for hours and days, and also when a window query
// returns more rows than its estimate (the limiters' windows are shorter
// than Config.Window).
func TestRowLimit(t *testing.T) {
	url, _ := seed(t) // acme: windows at 10:00:30, 10:01:30, 11:00:30, 11:01:30 on 2026-03-01
	tests := []struct {
		name    string
		maxRows int
		window  time.Duration
		query   string
		status  int
		wantMsg string
	}{
		{"hours within the limit", 2, time.Minute, "from=2026-03-01T10:00:00Z&to=2026-03-01T12:00:00Z&granularity=hour", 200, ""},
		{"hours over the limit", 2, time.Minute, "from=2026-03-01T10:00:00Z&to=2026-03-01T12:00:01Z&granularity=hour", 400, "3 hour rows, more than the limit of 2"},
		{"days over the limit", 2, time.Minute, "from=2026-03-01T00:00:00Z&to=2026-03-04T00:00:00Z&granularity=day", 400, "3 day rows, more than the limit of 2"},
		{"windows estimated over", 100, time.Minute, "from=2026-03-01T10:00:00Z&to=2026-03-01T12:00:00Z&granularity=window", 400, "120 window rows"},
		{"windows returned over", 2, time.Hour, "from=2026-03-01T10:00:00Z&to=2026-03-01T12:00:00Z&granularity=window", 400, "more than 2 window rows"},
		{"windows within", 4, time.Hour, "from=2026-03-01T10:00:00Z&to=2026-03-01T12:00:00Z&granularity=window", 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := billing.DefaultConfig()
			cfg.MaxRows, cfg.Window, cfg.MaxConns = tt.maxRows, tt.window, 1
			l, _ := newLedger(t, url, cfg)
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/v1/usage?key=acme&"+tt.query, nil)
			req.Header.Set("Authorization", "Bearer "+tokA)
			(&billing.Handler{Ledger: l, Access: testAccess(t)}).ServeHTTP(rec, req)
			body := decodeError(t, rec.Body.Bytes())
			if rec.Code != tt.status || (tt.status == 400 && (body["field"] != "to" || !strings.Contains(body["error"], tt.wantMsg))) {
				t.Fatalf("status %d body %v, want %d naming \"to\" with %q", rec.Code, body, tt.status, tt.wantMsg)
			}
		})
	}
}

// The billing pool's connections carry the statement timeout and are
// read-only, and Postgres itself stops a statement that runs past it
// (here: one waiting on a lock), with no help from a context deadline.
func TestPoolStatementTimeout(t *testing.T) {
	url, writer := seed(t)
	cfg := billing.DefaultConfig()
	cfg.StatementTimeout = 200 * time.Millisecond
	cfg.MaxConns = 2
	l, pool := newLedger(t, url, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	for _, tt := range []struct{ param, want string }{
		{"statement_timeout", "200ms"},
		{"default_transaction_read_only", "on"},
		{"application_name", "quota-billing"},
	} {
		var got string
		if err := pool.QueryRow(ctx, "SHOW "+tt.param).Scan(&got); err != nil || got != tt.want {
			t.Errorf("SHOW %s = %q, %v; want %q", tt.param, got, err, tt.want)
		}
	}
	var pgErr *pgconn.PgError
	if _, err := pool.Exec(ctx, "CREATE TABLE billing_must_not_write ()"); !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Errorf("write through the billing pool: %v, want SQLSTATE 25006 (read-only transaction)", err)
	}

	// Hold a lock that every read of usage_reports waits for.
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "LOCK TABLE usage_reports IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	_, err = pool.Exec(ctx, "SELECT count(*) FROM usage_windows")
	if !errors.As(err, &pgErr) || pgErr.Code != "57014" {
		t.Fatalf("blocked query through the pool: %v, want SQLSTATE 57014 (statement timeout)", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("statement timeout took %v", took)
	}

	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v1/usage?key=acme&from=2026-03-01T10:00:00Z&to=2026-03-01T12:00:00Z", nil)
	req.Header.Set("Authorization", "Bearer "+tokA)
	(&billing.Handler{Ledger: l, Access: testAccess(t)}).ServeHTTP(rec, req)
	if body := decodeError(t, rec.Body.Bytes()); rec.Code != 503 || !strings.Contains(body["error"], "statement timeout") {
		t.Fatalf("blocked usage query: status %d body %v, want 503 naming the statement timeout", rec.Code, body)
	}
	if _, err := l.Usage(ctx, billing.Query{Key: "acme", From: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC),
		To: time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)}); !errors.Is(err, billing.ErrTimeout) {
		t.Fatalf("Usage: %v, want ErrTimeout", err)
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := billing.Config{StatementTimeout: -1}
	_, err := billing.NewLedger(nil, cfg)
	for _, field := range []string{"MaxRows", "StatementTimeout", "MaxConns", "Window"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("NewLedger(%+v) = %v, want an error naming %s", cfg, err, field)
		}
	}
	if _, err := billing.NewPool("postgres://db/q", cfg); err == nil {
		t.Error("NewPool accepted an invalid config")
	}
}
