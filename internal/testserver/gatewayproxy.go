package testserver

import (
	"net"
	"regexp"
	"sync"
	"testing"
	"time"
)

// GatewayProxy sits in front of one region's NATS gateway port; the server
// advertises it, so every gateway connection into the region, whether to a
// configured or a learned URL, goes through it. It delays every byte by
// oneWay in each direction (the cross-region latency), learns each
// connection's origin region from the gateway CONNECT, and drops
// connections whose origin or destination is cut.
type GatewayProxy struct {
	region string
	oneWay time.Duration
	isCut  func(region string) bool
	ln     net.Listener

	mu     sync.Mutex
	target string               // the server's gateway address; guarded by mu
	conns  map[*gwConn]struct{} // guarded by mu
	wg     sync.WaitGroup
}

type gwConn struct {
	in, out net.Conn
	origin  string // gateway name from CONNECT; guarded by GatewayProxy.mu
}

// StartGatewayProxy listens on a free loopback port in front of region's
// gateway (set with SetTarget), delaying each direction by oneWay (0: none).
// isCut says whether a region is cut off; it is asked on every connection.
func StartGatewayProxy(t testing.TB, region string, oneWay time.Duration, isCut func(string) bool) *GatewayProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testserver: gateway proxy: %v", err)
	}
	p := &GatewayProxy{region: region, oneWay: oneWay, isCut: isCut, ln: ln, conns: map[*gwConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address to advertise and dial.
func (p *GatewayProxy) Addr() string { return p.ln.Addr().String() }

// SetTarget points the proxy at the server's real gateway address; before
// it is set, connections are refused.
func (p *GatewayProxy) SetTarget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = addr
}

// Target is the address set with SetTarget.
func (p *GatewayProxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

func (p *GatewayProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		if target == "" || p.isCut(p.region) {
			in.Close()
			continue
		}
		out, err := net.DialTimeout("tcp", target, time.Second)
		if err != nil {
			in.Close()
			continue
		}
		c := &gwConn{in: in, out: out}
		p.mu.Lock()
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, out, in, true)
		go p.pipe(c, in, out, false)
	}
}

var gatewayField = regexp.MustCompile(`"gateway":"([^"]+)"`)

type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies src to dst, each chunk oneWay after it was read. On the
// connecting side (sniff) it reads the origin from the CONNECT and drops
// the connection if that region is cut.
func (p *GatewayProxy) pipe(c *gwConn, dst, src net.Conn, sniff bool) {
	defer p.wg.Done()
	defer p.drop(c)
	// Room for a burst of chunks in flight during the delay; a full queue
	// slows the reader, as a saturated link would.
	q := make(chan chunk, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ch := range q {
			if w := time.Until(ch.at); w > 0 {
				time.Sleep(w) // the emulated link latency, not a synchronisation
			}
			if _, err := dst.Write(ch.b); err != nil {
				for range q {
				}
				return
			}
		}
	}()
	defer func() { close(q); <-done }()
	buf := make([]byte, 32<<10)
	var seen []byte
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if sniff && len(seen) < 8<<10 {
				seen = append(seen, buf[:n]...)
				if m := gatewayField.FindSubmatch(seen); m != nil {
					origin := string(m[1])
					p.mu.Lock()
					c.origin = origin
					p.mu.Unlock()
					sniff = false
					if p.isCut(origin) || p.isCut(p.region) {
						return
					}
				}
			}
			q <- chunk{b: append([]byte(nil), buf[:n]...), at: time.Now().Add(p.oneWay)}
		}
		if err != nil {
			return
		}
	}
}

func (p *GatewayProxy) drop(c *gwConn) {
	c.in.Close()
	c.out.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// CloseMatching closes the connections into this region if region is this
// region, or those coming from region.
func (p *GatewayProxy) CloseMatching(region string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if p.region == region || c.origin == region {
			c.in.Close()
			c.out.Close()
		}
	}
}

// Close stops the proxy and every connection through it.
func (p *GatewayProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.in.Close()
		c.out.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
