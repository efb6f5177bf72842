package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
)

// reconciler stream-migrate replaces a usage stream of limits retention
// (an older release's) by a work-queue one, and then has nothing to do.
func TestStreamMigrateCommand(t *testing.T) {
	url := testserver.StartNATS(t).URL
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	legacy := ledger.DefaultStreamConfig()
	legacy.Retention = jetstream.LimitsPolicy
	if _, err := ledger.EnsureStream(ctx, js, legacy); err != nil {
		t.Fatal(err)
	}
	setQuotaEnv(t, map[string]string{"QUOTA_NATS": url})
	for _, want := range []string{"replaced: WorkQueue retention", "WorkQueue retention already: nothing to do"} {
		var out bytes.Buffer
		if err := run([]string{"stream-migrate", "--migrate-wait", "10s"}, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), want) {
			t.Fatalf("stream-migrate printed %q, want %q", out.String(), want)
		}
	}
	s, err := js.Stream(ctx, legacy.Name)
	if err != nil || s.CachedInfo().Config.Retention != jetstream.WorkQueuePolicy {
		t.Fatalf("after stream-migrate: %v, %+v", err, s)
	}
}
