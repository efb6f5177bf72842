package main

import (
	"flag"
	"maps"
	"slices"
	"testing"

	"github.com/quotaplatform/quota/participant"
)

// pinnedFlags is every flag and its default as they were before the
// settings became one declaration: a flag's name is also its environment
// variable (QUOTA_<FLAG>) and its config-file key, so a change here is a
// change operators see. --process-id's default is the host and pid.
var pinnedFlags = map[string]string{
	"admin-token":            "",
	"catalog-cluster":        "",
	"catalog-replicas":       "1",
	"check-token":            "",
	"clock-skew":             "0s",
	"config":                 "",
	"control-plane":          "false",
	"data-dir":               "./data",
	"default-capacity":       "200",
	"default-rate":           "100",
	"drain-timeout":          "10s",
	"flush-timeout":          "10s",
	"gc-percent":             "400",
	"gossip-interval":        "1s",
	"grpc-listen":            "",
	"hotkey-metrics":         "0",
	"idempotency-horizon":    "24h0m0s",
	"listen":                 ":8080",
	"log-level":              "info",
	"memberlist-bind":        "",
	"memberlist-join":        "",
	"memberlist-key":         "",
	"nats":                   "",
	"nats-creds":             "",
	"nats-password":          "",
	"nats-tls-ca":            "",
	"nats-tls-cert":          "",
	"nats-tls-key":           "",
	"nats-user":              "",
	"otlp-endpoint":          "",
	"processes":              "1",
	"read-token":             "",
	"redis":                  "",
	"redis-cluster":          "false",
	"region":                 "local",
	"region-weights":         "",
	"regions":                "",
	"report-interval":        "5s",
	"rls-config":             "",
	"rls-response-headers":   "false",
	"share-floor":            "0.05",
	"shutdown-delay":         "5s",
	"store-timeout":          "5ms",
	"usage-encoding":         "batch",
	"usage-stream-cluster":   "",
	"usage-stream-max-bytes": "1073741824",
	"usage-stream-replicas":  "1",
	"window":                 "1m0s",
}

// TestFlagsPinned: the daemon declares exactly the pinned flags, with the
// pinned defaults.
func TestFlagsPinned(t *testing.T) {
	got := map[string]string{}
	o := defaultOptions()
	declare(&o).FlagSet().VisitAll(func(f *flag.Flag) { got[f.Name] = f.DefValue })
	if want := participant.DefaultOptions().ProcessID; got["process-id"] != want {
		t.Errorf("--process-id: default %q, want %q", got["process-id"], want)
	}
	delete(got, "process-id")
	if maps.Equal(got, pinnedFlags) {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(pinnedFlags)) {
		if g, ok := got[name]; !ok || g != pinnedFlags[name] {
			t.Errorf("--%s: default %q (declared %v), want %q", name, g, ok, pinnedFlags[name])
		}
	}
	for name := range got {
		if _, ok := pinnedFlags[name]; !ok {
			t.Errorf("--%s: not pinned", name)
		}
	}
}
