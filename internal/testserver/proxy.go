package testserver

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxy is a fault-injecting TCP proxy (toxiproxy, as a library) between a
// client and a real server: it can add latency, cut the link so that
// connections are refused, or black-hole it so that they hang.
type Proxy struct {
	p  *toxiproxy.Proxy
	mu sync.Mutex
	up bool // guarded by mu
}

var proxySeq struct {
	sync.Mutex
	n int
}

// StartProxy listens on a free loopback port and forwards to upstream
// (host:port) until the test ends.
func StartProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	proxySeq.Lock()
	proxySeq.n++
	name := fmt.Sprintf("proxy-%d", proxySeq.n)
	proxySeq.Unlock()
	p := &Proxy{p: toxiproxy.NewProxy(srv, name, "127.0.0.1:0", upstream)}
	if err := p.p.Start(); err != nil {
		t.Fatalf("testserver: start proxy to %s: %v", upstream, err)
	}
	p.up = true
	t.Cleanup(p.Close)
	return p
}

// Addr is where clients connect.
func (p *Proxy) Addr() string { return p.p.Listen }

// Latency delays every byte in both directions by d (0 removes it).
func (p *Proxy) Latency(d time.Duration) error {
	return p.latency(d, "downstream", "upstream")
}

// ReplyLatency delays only what the server sends back by d (0 removes
// it): requests reach the server and run at once, but their callers hear
// of it late, as with a call that times out after the server executed it.
func (p *Proxy) ReplyLatency(d time.Duration) error {
	return p.latency(d, "downstream")
}

func (p *Proxy) latency(d time.Duration, streams ...string) error {
	p.removeToxic("latency_down")
	p.removeToxic("latency_up")
	if d <= 0 {
		return nil
	}
	for _, stream := range streams {
		js := fmt.Sprintf(`{"name":"latency_%s","type":"latency","stream":"%s","attributes":{"latency":%d}}`,
			stream[:strings.Index(stream, "stream")], stream, d.Milliseconds())
		if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			return fmt.Errorf("testserver: add latency: %w", err)
		}
	}
	return nil
}

// Blackhole makes the link swallow data without closing: calls hang until
// their own deadline, like a network partition.
func (p *Proxy) Blackhole() error {
	p.removeToxic("blackhole")
	js := `{"name":"blackhole","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
		return fmt.Errorf("testserver: add blackhole: %w", err)
	}
	return nil
}

// Down closes the listener and every open connection: new connections are
// refused until Restore.
func (p *Proxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.up {
		p.p.Stop()
		p.up = false
	}
}

// Restore removes every fault and listens again on the same address.
func (p *Proxy) Restore() error {
	p.p.Toxics.ResetToxics(context.Background())
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.up {
		if err := p.p.Start(); err != nil {
			return fmt.Errorf("testserver: restart proxy: %w", err)
		}
		p.up = true
	}
	return nil
}

// Close stops the proxy for good.
func (p *Proxy) Close() {
	p.p.Toxics.ResetToxics(context.Background())
	p.Down()
}

func (p *Proxy) removeToxic(name string) {
	_ = p.p.Toxics.RemoveToxic(context.Background(), name)
}
