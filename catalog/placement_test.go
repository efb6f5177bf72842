package catalog_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/internal/testserver"
)

// A bucket that exists with other replicas or another cluster than the
// control plane's settings is left as it is, and the difference is logged
// once, however often the watch binds again. A read-only catalogue, which
// never creates the bucket, says nothing of it.
func TestExistingBucketIsNeverDowngraded(t *testing.T) {
	ns := testserver.StartNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js := connect(t, ns.URL)
	// The operator made the bucket: one replica, no placement.
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "quota-catalog", History: 64, Replicas: 1}); err != nil {
		t.Fatal(err)
	}

	var logs testserver.LogBuffer
	cfg := catalog.DefaultConfig()
	cfg.Replicas, cfg.Cluster = 3, "eu"
	cfg.RetryInterval = 50 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, err := catalog.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(connect(t, ns.URL)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	waitSynced(t, c)
	// Bind again twice: every read of the bucket binds.
	for want := 2; want <= 3; want++ {
		c.Resync()
		testserver.WaitFor(t, 5*time.Second, 5*time.Millisecond, func() error {
			if n := strings.Count(logs.String(), "catalogue read from bucket"); n < want {
				return fmt.Errorf("bucket read %d times, want %d", n, want)
			}
			return nil
		})
	}
	out := logs.String()
	if n := strings.Count(out, "the catalogue bucket exists with other settings"); n != 1 {
		t.Fatalf("want the difference logged once, got %d times:\n%s", n, out)
	}
	for _, want := range []string{"bucket=quota-catalog", "replicas 1 (this process's setting: 3)", `cluster \"\" (this process's setting: \"eu\")`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	s, err := js.Stream(ctx, "KV_quota-catalog")
	if err != nil {
		t.Fatal(err)
	}
	if sc := s.CachedInfo().Config; sc.Replicas != 1 || sc.Placement != nil {
		t.Fatalf("the operator's bucket was changed: replicas %d, placement %+v", sc.Replicas, sc.Placement)
	}

	var quiet testserver.LogBuffer
	ro := catalog.DefaultConfig()
	ro.Replicas, ro.Cluster, ro.ReadOnly = 3, "eu", true
	ro.Logger = slog.New(slog.NewTextHandler(&quiet, nil))
	r, err := catalog.New(ro)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(connect(t, ns.URL)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	waitSynced(t, r)
	if strings.Contains(quiet.String(), "other settings") {
		t.Fatalf("a read-only catalogue logged the bucket's settings:\n%s", quiet.String())
	}
}

// A bucket the control plane creates carries its replicas and placement.
func TestBucketCreatedWithPlacement(t *testing.T) {
	ns := testserver.StartNATS(t)
	cfg := catalog.DefaultConfig()
	cfg.Cluster = "eu"
	cfg.Logger = slog.New(slog.DiscardHandler)
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
	s, err := js.Stream(context.Background(), "KV_quota-catalog")
	if err != nil {
		t.Fatal(err)
	}
	if p := s.CachedInfo().Config.Placement; p == nil || p.Cluster != "eu" {
		t.Fatalf("created bucket's placement: %+v", p)
	}
}

func TestConfigChecksTheClusterName(t *testing.T) {
	for _, name := range []string{"e u", "eu.west", "eu*", "eu>"} {
		cfg := catalog.DefaultConfig()
		cfg.Cluster = name
		if _, err := catalog.New(cfg); err == nil || !strings.Contains(err.Error(), "Cluster") {
			t.Errorf("Cluster %q: err = %v, want one naming Cluster", name, err)
		}
	}
	cfg := catalog.DefaultConfig()
	cfg.Cluster = "us-west"
	if _, err := catalog.New(cfg); err != nil {
		t.Errorf("Cluster us-west: %v", err)
	}
}
