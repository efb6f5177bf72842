package main

import (
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/quotaplatform/quota/internal/natsrole"
)

// The reconciler connects with its role's inbox prefix, the only inboxes
// the shipped NATS configuration lets it subscribe to (internal/natsconf's
// TestShippedRoles runs the roles on a real server).
func TestNATSOptionsUseTheReconcilersInboxes(t *testing.T) {
	o := defaultOptions()
	o.NATSAuth.User, o.NATSAuth.Password = "reconciler", "secret"
	opts, err := natsOptions(o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	applied := nats.GetDefaultOptions()
	for _, opt := range opts {
		if err := opt(&applied); err != nil {
			t.Fatal(err)
		}
	}
	if want := natsrole.InboxPrefix(natsrole.Reconciler); applied.InboxPrefix != want {
		t.Fatalf("inbox prefix %q, want %q", applied.InboxPrefix, want)
	}
}
