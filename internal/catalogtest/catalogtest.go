// Package catalogtest starts a real catalogue (package catalog) on a
// JetStream for tests, stopped when the test ends. It is for tests only.
package catalogtest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/catalog"
)

// Start starts a catalogue configured by cfg on js and waits (at most
// 20 s) until it has read its bucket; it is stopped when the test ends.
func Start(t testing.TB, js jetstream.JetStream, cfg catalog.Config) *catalog.Catalog {
	t.Helper()
	c, err := catalog.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(js); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}
