package redisstore_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region/redisstore"
)

// TestLoggerThrottlesToJSON: go-redis's lines come out as JSON log
// records of the process's logger, one per interval, each with the number
// of lines left out before it.
func TestLoggerThrottlesToJSON(t *testing.T) {
	var buf testserver.LogBuffer
	c := clock.NewManual(time.Unix(1_700_000_000, 0))
	l := redisstore.NewLogger(slog.New(slog.NewJSONHandler(&buf, nil)), time.Second, c)
	ctx := context.Background()
	for i := 0; i < 50; i++ { // a burst within one second
		l.Printf(ctx, "redis: dial tcp %s: connection refused (%d)", "10.0.0.1:6379", i)
	}
	c.Advance(time.Second)
	l.Printf(ctx, "redis: dial tcp %s: connection refused (%d)", "10.0.0.1:6379", 50)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines for 51 calls over one second, want 2:\n%s", len(lines), buf.String())
	}
	want := []struct {
		msg     string
		skipped float64
	}{
		{"redis: dial tcp 10.0.0.1:6379: connection refused (0)", 0},
		{"redis: dial tcp 10.0.0.1:6379: connection refused (50)", 49},
	}
	for i, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %q", i, line)
		}
		if rec["msg"] != want[i].msg || rec["skipped"] != want[i].skipped || rec["level"] != "WARN" || rec["component"] != "go-redis" {
			t.Errorf("line %d = %v, want msg %q skipped %v at WARN from go-redis", i, rec, want[i].msg, want[i].skipped)
		}
	}
}
