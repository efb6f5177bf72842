package main

import (
	"io"
	"strings"
	"testing"
)

// --usage-stream-cluster and --catalog-cluster place what this process
// creates; a value that cannot be a NATS cluster name is refused, naming
// the flag.
func TestPlacementFlags(t *testing.T) {
	setQuotaEnv(t, map[string]string{"QUOTA_CATALOG_CLUSTER": "eu"})
	o, err := parseOptions([]string{"--usage-stream-cluster", "eu", "--usage-stream-replicas", "3", "--catalog-replicas", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Ledger.Stream.Cluster != "eu" || o.CatalogCluster != "eu" || o.Ledger.Stream.Replicas != 3 || o.CatalogReplicas != 3 {
		t.Fatalf("options %+v", o)
	}
	setQuotaEnv(t, nil)
	if o, err := parseOptions(nil, io.Discard); err != nil || o.Ledger.Stream.Cluster != "" || o.CatalogCluster != "" {
		t.Fatalf("defaults: %q %q, %v", o.Ledger.Stream.Cluster, o.CatalogCluster, err)
	}
	for _, tc := range []struct{ flag, value string }{
		{"usage-stream-cluster", "eu west"},
		{"usage-stream-cluster", "eu.west"},
		{"catalog-cluster", "eu*"},
		{"catalog-cluster", "eu.>"},
	} {
		_, err := parseOptions([]string{"--" + tc.flag, tc.value}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--"+tc.flag+": ") {
			t.Errorf("--%s %q: err = %v, want one naming the flag", tc.flag, tc.value, err)
		}
	}
}
