package edge_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/edge"
)

func TestSecretNeverPrints(t *testing.T) {
	const value = "hunter2-hunter2-hunter2"
	var s edge.Secret
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Var(&s, "token", "a secret")
	if err := fs.Parse([]string{"--token", value}); err != nil {
		t.Fatal(err)
	}
	if string(s) != value {
		t.Fatalf("Set stored %q", string(s))
	}
	opts := struct{ Token edge.Secret }{s}
	for _, out := range []string{s.String(), fmt.Sprint(s), fmt.Sprintf("%v %+v %#v", opts, opts, opts)} {
		if strings.Contains(out, value) {
			t.Fatalf("the secret printed: %s", out)
		}
	}
	if got := edge.Secret("").String(); got != "" {
		t.Fatalf("an unset secret prints %q, want empty", got)
	}
}

// TestNewLogger: durations log as their text, other values as slog writes
// them, and a bad level names --log-level.
func TestNewLogger(t *testing.T) {
	var b bytes.Buffer
	log, err := edge.NewLogger(&b, "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.Info("drain", "delay", 1500*time.Millisecond, "none", time.Duration(0), "n", 3, slog.Group("inner", "wait", time.Minute))
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, b.String())
	}
	inner, _ := rec["inner"].(map[string]any)
	if rec["delay"] != "1.5s" || rec["none"] != "0s" || rec["n"] != float64(3) || inner["wait"] != "1m0s" {
		t.Fatalf("logged %s", b.String())
	}
	if _, err := edge.NewLogger(&b, "loud"); err == nil || !strings.Contains(err.Error(), "--log-level") {
		t.Fatalf("bad level: %v", err)
	}
}
