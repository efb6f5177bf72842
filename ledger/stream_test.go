package ledger_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
)

// EnsureStream creates a missing stream from its config, and never changes
// one an operator made: its limits stay theirs. A stream whose subjects
// would refuse reports is an error naming both.
func TestEnsureStreamKeepsTheOperatorsSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, err := nats.Connect(testserver.StartNATS(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	cfg := ledger.DefaultStreamConfig()
	cfg.MaxBytes = 8 << 20
	s, err := ledger.EnsureStream(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := s.CachedInfo().Config
	if got.MaxBytes != 8<<20 || got.Discard != jetstream.DiscardNew || got.Duplicates != cfg.DuplicateWindow ||
		len(got.Subjects) != 1 || got.Subjects[0] != "quota.usage.>" {
		t.Fatalf("created stream: %+v", got)
	}

	// The operator raises the limit and the age; a process with other
	// defaults starts and must not undo it.
	got.MaxBytes, got.MaxAge = 32<<20, 30*24*time.Hour
	if _, err := js.UpdateStream(ctx, got); err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.EnsureStream(ctx, js, ledger.DefaultStreamConfig()); err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(ctx, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	if c := info.CachedInfo().Config; c.MaxBytes != 32<<20 || c.MaxAge != 30*24*time.Hour {
		t.Fatalf("EnsureStream changed the operator's stream: max bytes %d, max age %v", c.MaxBytes, c.MaxAge)
	}

	other := ledger.DefaultStreamConfig()
	other.Name = "USAGE_ELSEWHERE"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: other.Name, Subjects: []string{"billing.usage.>"}}); err != nil {
		t.Fatal(err)
	}
	_, err = ledger.EnsureStream(ctx, js, other)
	if err == nil || !strings.Contains(err.Error(), "billing.usage.>") || !strings.Contains(err.Error(), "quota.usage.>") {
		t.Fatalf("a stream that refuses reports: %v", err)
	}
}

func TestStreamSubject(t *testing.T) {
	cfg := ledger.DefaultStreamConfig()
	for _, tc := range []struct{ region, process, want string }{
		{"eu", "eu-1@kx2", "quota.usage.eu.eu-1@kx2"},
		{"eu", "eu-1@kx2~late1a.3", "quota.usage.eu.eu-1@kx2"},
		{"us-west", "pod.a", "quota.usage.us-west.pod.a"},
	} {
		if got := cfg.Subject(tc.region, tc.process); got != tc.want {
			t.Errorf("Subject(%q, %q) = %q, want %q", tc.region, tc.process, got, tc.want)
		}
	}
}
