package main

import (
	"io"
	"strings"
	"testing"
)

// --stream-cluster places the usage stream when this process creates it; a
// value that cannot be a NATS cluster name is refused, naming the flag.
func TestStreamClusterFlag(t *testing.T) {
	setQuotaEnv(t, nil)
	o, err := parseFlags("serve", []string{"--stream-cluster", "eu", "--stream-replicas", "3"}, io.Discard)
	if err != nil || o.Stream.Cluster != "eu" || o.Stream.Replicas != 3 {
		t.Fatalf("options %+v, err %v", o, err)
	}
	setQuotaEnv(t, map[string]string{"QUOTA_STREAM_CLUSTER": "us-west"})
	if o, err := parseFlags("serve", nil, io.Discard); err != nil || o.Stream.Cluster != "us-west" {
		t.Fatalf("from the environment: %q, %v", o.Stream.Cluster, err)
	}
	setQuotaEnv(t, nil)
	if o, err := parseFlags("serve", nil, io.Discard); err != nil || o.Stream.Cluster != "" {
		t.Fatalf("default: %q, %v", o.Stream.Cluster, err)
	}
	for _, v := range []string{"eu west", "eu.west", "eu*", ">"} {
		_, err := parseFlags("serve", []string{"--stream-cluster", v}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--stream-cluster: ") {
			t.Errorf("--stream-cluster %q: err = %v, want one naming the flag", v, err)
		}
	}
	if _, err := parseFlags("migrate", []string{"--stream-cluster", "eu"}, io.Discard); err == nil {
		t.Error("migrate took --stream-cluster")
	}
}
