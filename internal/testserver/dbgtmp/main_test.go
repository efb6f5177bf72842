package dbgtmp

import (
	"net/url"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

func TestDbg(t *testing.T) {
	o := &natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true,
		ServerName: "nats-eu", JetStreamDomain: "eu"}
	o.Cluster.Name = "eu"
	o.Gateway = natsserver.GatewayOpts{Name: "eu", Host: "127.0.0.1", Port: 17222,
		Gateways: []*natsserver.RemoteGatewayOpts{{Name: "us", URLs: []*url.URL{{Scheme: "nats", Host: "127.0.0.1:17223"}}}}}
	s, err := natsserver.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	s.ConfigureLogger()
	go s.Start()
	t.Log(s.ReadyForConnections(3 * time.Second))
	s.Shutdown()
}
