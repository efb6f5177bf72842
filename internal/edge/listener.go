package edge

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// IdleUntilFirstByte wraps l so that a new connection waits for its first
// request the way a kept-alive connection waits for its next one: for up to
// idle (the server's IdleTimeout) for the first byte, and only from that
// byte on under the read deadlines the HTTP server sets (ReadHeaderTimeout,
// ReadTimeout). An idle of zero waits for the first byte without a limit.
//
// net/http starts ReadHeaderTimeout for a connection's first request at
// accept. A pooling client (Go's Transport, a proxy that preconnects) may
// open a connection and keep it unused in its pool: the server closes it
// after ReadHeaderTimeout, and a request the client sends on it at that
// moment fails with EOF or "connection reset by peer". A client cannot
// retry a POST that failed so; a check is a POST. Between requests net/http
// already waits for IdleTimeout, so a client that keeps one connection
// open for as long as it likes after a first request costs the server
// the same.
func IdleUntilFirstByte(l net.Listener, idle time.Duration) net.Listener {
	return &firstByteListener{Listener: l, idle: idle}
}

type firstByteListener struct {
	net.Listener
	idle time.Duration
}

func (l *firstByteListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &firstByteConn{Conn: c, idle: l.idle}, nil
}

// firstByteConn holds back the read deadlines set before its first byte:
// its first Read waits up to idle, then applies the last deadline held
// back, moved by the time the wait took.
type firstByteConn struct {
	net.Conn
	idle time.Duration

	started atomic.Bool // the first Read has returned; deadlines pass through

	mu       sync.Mutex
	deadline time.Time // the read deadline held back; guarded by mu
	setAt    time.Time // when it was set; guarded by mu
}

func (c *firstByteConn) Read(p []byte) (int, error) {
	if c.started.Load() {
		return c.Conn.Read(p)
	}
	if c.idle > 0 {
		if err := c.Conn.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
			return 0, err
		}
	}
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started.Store(true)
	deadline := c.deadline
	if !deadline.IsZero() {
		deadline = time.Now().Add(deadline.Sub(c.setAt))
	}
	if derr := c.Conn.SetReadDeadline(deadline); err == nil && derr != nil {
		err = derr
	}
	return n, err
}

func (c *firstByteConn) SetReadDeadline(t time.Time) error {
	if c.started.Load() {
		return c.Conn.SetReadDeadline(t)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started.Load() { // the first Read returned meanwhile
		return c.Conn.SetReadDeadline(t)
	}
	c.deadline, c.setAt = t, time.Now()
	return nil
}

func (c *firstByteConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

// CloseWrite lets net/http half-close the connection after an error answer,
// as it does on a bare TCP connection, so that the client reads the answer.
func (c *firstByteConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
