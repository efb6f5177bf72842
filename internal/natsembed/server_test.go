package natsembed_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/internal/natsembed"
)

func TestInProcessJetStream(t *testing.T) {
	cfg := natsembed.DefaultConfig()
	cfg.StoreDir = t.TempDir()
	s, err := natsembed.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	nc, err := nats.Connect("", s.ConnectOption())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
}
