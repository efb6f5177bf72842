package main

import (
	"flag"
	"maps"
	"slices"
	"testing"
)

// pinnedFlags is every subcommand's flags and their defaults as they were
// before the settings became one declaration: a flag's name is also its
// environment variable (QUOTA_<FLAG>) and its config-file key, so a change
// here is a change operators see.
var pinnedFlags = map[string]map[string]string{
	"serve": {
		"batch-interval":            "200ms",
		"batch-size":                "5000",
		"billing-max-conns":         "4",
		"billing-max-rows":          "10000",
		"window":                    "1m0s",
		"billing-statement-timeout": "5s",
		"billing-token":             "",
		"catalog-bucket":            "quota-catalog",
		"close-after":               "15m0s",
		"durable":                   "reconciler",
		"listen":                    ":8082",
		"log-level":                 "info",
		"max-new-partitions":        "12",
		"max-report-age":            "2232h0m0s",
		"max-report-skew":           "1h0m0s",
		"nats":                      "nats://127.0.0.1:4222",
		"nats-creds":                "",
		"nats-password":             "",
		"nats-tls-ca":               "",
		"nats-tls-cert":             "",
		"nats-tls-key":              "",
		"nats-user":                 "",
		"otlp-endpoint":             "",
		"postgres":                  "postgres://postgres@127.0.0.1:5432/quota?sslmode=disable",
		"quota-base-subject":        "quota.base",
		"refund-horizon":            "24h0m0s",
		"regions":                   "",
		"shutdown-delay":            "5s",
		"stream":                    "QUOTA_USAGE",
		"stream-cluster":            "",
		"stream-max-bytes":          "1073741824",
		"stream-replicas":           "1",
		"write-parallel":            "2",
	},
	"migrate": {
		"log-level": "info",
		"postgres":  "postgres://postgres@127.0.0.1:5432/quota?sslmode=disable",
	},
	"retention": {
		"ahead-months": "3",
		"keep-months":  "-1",
		"log-level":    "info",
		"metrics-file": "",
		"postgres":     "postgres://postgres@127.0.0.1:5432/quota?sslmode=disable",
		"sink-keep":    "2232h0m0s",
	},
	"usage": {
		"at":                        "",
		"billing-max-rows":          "10000",
		"window":                    "1m0s",
		"billing-statement-timeout": "5s",
		"format":                    "json",
		"from":                      "",
		"granularity":               "hour",
		"key":                       "",
		"log-level":                 "info",
		"postgres":                  "postgres://postgres@127.0.0.1:5432/quota?sslmode=disable",
		"quotas":                    "false",
		"to":                        "",
	},
	"export": {
		"billing-statement-timeout": "5s",
		"calendar":                  "utc",
		"format":                    "csv",
		"granularity":               "month",
		"log-level":                 "info",
		"month":                     "",
		"postgres":                  "postgres://postgres@127.0.0.1:5432/quota?sslmode=disable",
	},
	"events": {
		"billing-statement-timeout": "5s",
		"calendar":                  "utc",
		"continuous":                "false",
		"every":                     "1h0m0s",
		"granularity":               "month",
		"log-level":                 "info",
		"lookback":                  "0s",
		"metrics-file":              "",
		"month":                     "",
		"nats":                      "nats://127.0.0.1:4222",
		"nats-creds":                "",
		"nats-password":             "",
		"nats-user":                 "",
		"postgres":                  "postgres://postgres@127.0.0.1:5432/quota?sslmode=disable",
		"sink":                      "",
	},
	"sinks-report": {
		"billing-statement-timeout": "5s",
		"calendar":                  "utc",
		"granularity":               "month",
		"log-level":                 "info",
		"month":                     "",
		"postgres":                  "postgres://postgres@127.0.0.1:5432/quota?sslmode=disable",
		"sink":                      "",
	},
	"stripe-sync": {
		"billing-statement-timeout": "5s",
		"calendar":                  "utc",
		"continuous":                "false",
		"every":                     "1h0m0s",
		"finalization-grace":        "1h0m0s",
		"granularity":               "month",
		"log-level":                 "info",
		"lookback":                  "0s",
		"meter":                     "",
		"metrics-file":              "",
		"month":                     "",
		"postgres":                  "postgres://postgres@127.0.0.1:5432/quota?sslmode=disable",
		"settle-after":              "1h0m0s",
		"stripe-batch":              "1",
		"stripe-key-env":            "QUOTA_STRIPE_KEY",
		"stripe-url":                "",
	},
	"stripe-settle": {
		"event-id":  "",
		"log-level": "info",
		"meter":     "",
		"outcome":   "",
		"postgres":  "postgres://postgres@127.0.0.1:5432/quota?sslmode=disable",
	},
	"stripe-customer set": {
		"anchor-day": "0",
		"customer":   "",
		"from":       "",
		"key":        "",
		"log-level":  "info",
		"postgres":   "postgres://postgres@127.0.0.1:5432/quota?sslmode=disable",
		"time-zone":  "",
	},
	"stripe-customer list": {
		"log-level": "info",
		"postgres":  "postgres://postgres@127.0.0.1:5432/quota?sslmode=disable",
	},
}

// TestFlagsPinned: every subcommand declares exactly the pinned flags,
// with the pinned defaults.
func TestFlagsPinned(t *testing.T) {
	for cmd, want := range pinnedFlags {
		got := map[string]string{}
		commandFlags(t, cmd).VisitAll(func(f *flag.Flag) { got[f.Name] = f.DefValue })
		if !maps.Equal(got, want) {
			for _, name := range slices.Sorted(maps.Keys(want)) {
				if g, ok := got[name]; !ok || g != want[name] {
					t.Errorf("%s --%s: default %q (declared %v), want %q", cmd, name, g, ok, want[name])
				}
			}
			for name := range got {
				if _, ok := want[name]; !ok {
					t.Errorf("%s --%s: not pinned", cmd, name)
				}
			}
		}
	}
}

// commandFlags is cmd's flag set.
func commandFlags(t *testing.T, cmd string) *flag.FlagSet {
	t.Helper()
	o := stripeOptions{options: defaultOptions(), KeyEnv: defaultStripeKeyEnv}
	s, ok := commandSettings(cmd, &o)
	if !ok {
		t.Fatalf("no command %q", cmd)
	}
	return s.FlagSet()
}
