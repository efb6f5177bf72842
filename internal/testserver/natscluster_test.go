package testserver

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestNATSClusterGatewaysAndCut(t *testing.T) {
	c := StartNATSCluster(t, "eu", "us", "ap")
	conns := map[string]*nats.Conn{}
	for _, r := range c.Regions() {
		nc, err := nats.Connect(c.URL(r))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		conns[r] = nc
	}
	sub, err := conns["ap"].SubscribeSync("hello.>")
	if err != nil {
		t.Fatal(err)
	}
	_ = conns["ap"].Flush()
	// Interest crosses the gateways: wait until a message from eu arrives.
	WaitFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		_ = conns["eu"].Publish("hello.eu", []byte("hi"))
		_, err := sub.NextMsg(50 * time.Millisecond)
		return err
	})

	c.Cut(t, "ap")
	for sub.Pending(); ; {
		if _, err := sub.NextMsg(10 * time.Millisecond); err != nil {
			break
		}
	}
	if err := conns["eu"].Publish("hello.eu", []byte("lost")); err != nil {
		t.Fatal(err)
	}
	_ = conns["eu"].Flush()
	if m, err := sub.NextMsg(300 * time.Millisecond); err == nil {
		t.Fatalf("message crossed a cut gateway: %q", m.Data)
	}
	// Inside the cut region, local traffic still flows.
	if err := conns["ap"].Publish("hello.ap", []byte("local")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(2 * time.Second); err != nil {
		t.Fatalf("local message in a cut region: %v", err)
	}

	c.Heal(t, "ap")
	WaitFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		_ = conns["us"].Publish("hello.us", []byte("back"))
		_, err := sub.NextMsg(50 * time.Millisecond)
		return err
	})
}

func TestNATSClusterJetStream(t *testing.T) {
	if testing.Short() {
		t.Skip("waits ~10 s for the JetStream meta leader")
	}
	c := StartNATSCluster(t, "eu", "us")
	for _, r := range c.Regions() {
		nc, err := nats.Connect(c.URL(r))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := nc.JetStream()
		if err != nil {
			t.Fatal(err)
		}
		WaitFor(t, 20*time.Second, 100*time.Millisecond, func() error {
			_, err := js.AddStream(&nats.StreamConfig{Name: "S" + r, Subjects: []string{"s." + r}})
			return err
		})
	}
}
