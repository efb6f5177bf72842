package ledger_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
)

// EnsureStream creates a missing stream from its config, and never changes
// one an operator made; one whose limits differ from the config is refused
// with an error naming each setting (ErrStreamMismatch). A stream whose
// subjects would refuse reports is an error naming both.
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
	if got.MaxBytes != 8<<20 || got.Discard != jetstream.DiscardNew || got.Duplicates != cfg.DuplicateWindow || got.Retention != jetstream.WorkQueuePolicy ||
		len(got.Subjects) != 1 || got.Subjects[0] != "quota.usage.>" {
		t.Fatalf("created stream: %+v", got)
	}

	// The operator raises the limit and sets an age; a reconciler
	// configured otherwise refuses the stream, naming both settings, and
	// does not undo them.
	got.MaxBytes, got.MaxAge = 32<<20, 30*24*time.Hour
	if _, err := js.UpdateStream(ctx, got); err != nil {
		t.Fatal(err)
	}
	_, err = ledger.EnsureStream(ctx, js, cfg)
	if err == nil || !errors.Is(err, ledger.ErrStreamMismatch) || !strings.Contains(err.Error(), "MaxAge (max_age) is 720h0m0s, the configuration says 0 (no age limit)") ||
		!strings.Contains(err.Error(), "MaxBytes (max_bytes) is 33554432, the configuration says 8388608") {
		t.Fatalf("EnsureStream of a stream with other limits: %v, want ErrStreamMismatch naming max_age and max_bytes", err)
	}
	agreeing := cfg
	agreeing.MaxBytes, agreeing.MaxAge = 32<<20, 30*24*time.Hour
	if _, err := ledger.EnsureStream(ctx, js, agreeing); err != nil {
		t.Fatalf("EnsureStream of a stream with the configured limits: %v", err)
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

// An existing stream with other replicas or another cluster than this
// process's settings is left as it is, and the difference is logged once,
// however often EnsureStream runs (the reconciler runs it at every rebind).
// A new stream is created with the placement asked for.
func TestEnsureStreamLogsOtherReplicasAndClusterOnce(t *testing.T) {
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

	// The operator made the stream: one replica, no placement, the
	// configured limits.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: ledger.DefaultStream, Subjects: []string{"quota.usage.>"}, Replicas: 1,
		MaxBytes: ledger.DefaultStreamMaxBytes, Duplicates: ledger.DefaultDuplicateWindow, Discard: jetstream.DiscardNew,
		Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	var logs testserver.LogBuffer
	cfg := ledger.DefaultStreamConfig()
	cfg.Replicas, cfg.Cluster = 3, "eu"
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	for range 3 {
		if _, err := ledger.EnsureStream(ctx, js, cfg); err != nil {
			t.Fatal(err)
		}
	}
	s, err := js.Stream(ctx, ledger.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if c := s.CachedInfo().Config; c.Replicas != 1 || c.Placement != nil {
		t.Fatalf("EnsureStream changed the operator's stream: replicas %d, placement %+v", c.Replicas, c.Placement)
	}
	out := logs.String()
	if n := strings.Count(out, "level=INFO"); n != 1 {
		t.Fatalf("want one info line, got %d:\n%s", n, out)
	}
	for _, want := range []string{"stream=QUOTA_USAGE", "replicas 1 (this process's setting: 3)", `cluster \"\" (this process's setting: \"eu\")`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}

	// Settings that match say nothing.
	var quiet testserver.LogBuffer
	same := ledger.DefaultStreamConfig()
	same.Logger = slog.New(slog.NewTextHandler(&quiet, nil))
	if _, err := ledger.EnsureStream(ctx, js, same); err != nil {
		t.Fatal(err)
	}
	if quiet.String() != "" {
		t.Fatalf("matching settings logged: %s", quiet.String())
	}

	// A stream this process creates carries the placement.
	placed := ledger.DefaultStreamConfig()
	placed.Name, placed.SubjectPrefix, placed.Cluster = "PLACED", "placed.usage", "eu"
	ps, err := ledger.EnsureStream(ctx, js, placed)
	if err != nil {
		t.Fatal(err)
	}
	if p := ps.CachedInfo().Config.Placement; p == nil || p.Cluster != "eu" {
		t.Fatalf("created stream's placement: %+v", p)
	}
}

// A stream made before work-queue retention (limits retention) is used,
// with one warning that it keeps written reports; any other retention
// than the configuration's is refused, and Interest retention cannot be
// configured.
func TestEnsureStreamLegacyRetention(t *testing.T) {
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
	legacy := ledger.DefaultStreamConfig()
	legacy.Retention = jetstream.LimitsPolicy
	if _, err := ledger.EnsureStream(ctx, js, legacy); err != nil {
		t.Fatal(err)
	}
	var logs testserver.LogBuffer
	cfg := ledger.DefaultStreamConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	for range 2 {
		if _, err := ledger.EnsureStream(ctx, js, cfg); err != nil {
			t.Fatalf("EnsureStream of a limits-retention stream: %v, want it used", err)
		}
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 || !strings.Contains(logs.String(), "stream-migrate") {
		t.Fatalf("want one warning naming the migration, got:\n%s", logs.String())
	}
	// The other way round is a mismatch: a limits configuration must not
	// take a work-queue stream for its own.
	wq := ledger.DefaultStreamConfig()
	wq.Name, wq.SubjectPrefix = "WQ", "wq.usage"
	if _, err := ledger.EnsureStream(ctx, js, wq); err != nil {
		t.Fatal(err)
	}
	wqAsLimits := wq
	wqAsLimits.Retention = jetstream.LimitsPolicy
	if _, err := ledger.EnsureStream(ctx, js, wqAsLimits); !errors.Is(err, ledger.ErrStreamMismatch) || !strings.Contains(err.Error(), "retention") {
		t.Fatalf("limits configuration on a work-queue stream: %v, want ErrStreamMismatch naming retention", err)
	}
	interest := ledger.DefaultStreamConfig()
	interest.Retention = jetstream.InterestPolicy
	if _, err := ledger.EnsureStream(ctx, js, interest); err == nil || !strings.Contains(err.Error(), "Retention") {
		t.Fatalf("Interest retention: %v, want an error naming Retention", err)
	}
}

func TestStreamConfigChecksTheClusterName(t *testing.T) {
	for _, name := range []string{"e u", "eu.west", "eu*", "eu>", "eu\t"} {
		cfg := ledger.DefaultStreamConfig()
		cfg.Cluster = name
		_, err := ledger.EnsureStream(context.Background(), nil, cfg)
		if err == nil || !strings.Contains(err.Error(), "Cluster") {
			t.Errorf("Cluster %q: err = %v, want one naming Cluster", name, err)
		}
		if ledger.CheckClusterName(name) == nil {
			t.Errorf("CheckClusterName(%q) = nil", name)
		}
	}
	for _, name := range []string{"", "eu", "us-west_2"} {
		if err := ledger.CheckClusterName(name); err != nil {
			t.Errorf("CheckClusterName(%q) = %v", name, err)
		}
	}
}

func TestStreamSubject(t *testing.T) {
	cfg := ledger.DefaultStreamConfig()
	for _, tc := range []struct{ region, process, want string }{
		{"eu", "eu-1@kx2", "quota.usage.eu.eu-1"},
		{"eu", "eu-1@kx2~late1a.3", "quota.usage.eu.eu-1"},
		{"eu", "eu-1~late1a.3", "quota.usage.eu.eu-1"},
		{"eu", "eu-1", "quota.usage.eu.eu-1"},
		{"us-west", "pod.a", "quota.usage.us-west.pod.a"},
	} {
		if got := cfg.Subject(tc.region, tc.process); got != tc.want {
			t.Errorf("Subject(%q, %q) = %q, want %q", tc.region, tc.process, got, tc.want)
		}
	}
}
