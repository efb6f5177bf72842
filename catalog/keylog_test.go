package catalog_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/limit"
)

// TestKeysLoggedAtDebugOnly: a key's assignment written, applied, read
// back from its history and, broken, skipped, logs the key (or its
// bucket name) at debug level only; lines above debug say "<key>".
func TestKeysLoggedAtDebugOnly(t *testing.T) {
	const key = "acct_secret_4242"
	ns := testserver.StartNATS(t)
	var logs testserver.LogBuffer
	cfg := catalog.DefaultConfig()
	cfg.RetryInterval = 50 * time.Millisecond
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := catalog.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	js := connect(t, ns.URL)
	if err := c.Start(js); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	waitSynced(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.PutPlan(ctx, "admin", "pro", limit.Plan{Rate: 10, Capacity: 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Assign(ctx, "admin", key, "pro"); err != nil {
		t.Fatal(err)
	}
	// A broken value under the key's name: the watch skips it, and so
	// does its history.
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, "key."+base64.RawURLEncoding.EncodeToString([]byte(key)), []byte("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WaitVersion(ctx, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := c.History(ctx, catalog.KindKey, key); err != nil {
		t.Fatal(err)
	}

	encoded := base64.RawURLEncoding.EncodeToString([]byte(key))
	var above, debugWithKey int
	for _, line := range bytes.Split(bytes.TrimSpace([]byte(logs.String())), []byte("\n")) {
		var rec struct{ Level string }
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		names := strings.Contains(string(line), key) || strings.Contains(string(line), encoded)
		switch {
		case rec.Level == "DEBUG" && names:
			debugWithKey++
		case rec.Level != "DEBUG":
			above++
			if names {
				t.Errorf("a key logged at %s: %s", rec.Level, line)
			}
		}
	}
	// The writes, the skips and the changes were logged, and the key
	// reached the debug lines.
	if above < 4 || debugWithKey < 3 {
		t.Fatalf("%d lines above debug, %d debug lines with the key; log:\n%s", above, debugWithKey, logs.String())
	}
}
