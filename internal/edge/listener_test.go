package edge_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/edge"
)

// serveOK serves 200 "ok" on a loopback port with the given timeouts,
// through IdleUntilFirstByte when wrap is set, and returns the address.
func serveOK(t *testing.T, wrap bool, readHeader, idle time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		ReadHeaderTimeout: readHeader,
		IdleTimeout:       idle,
	}
	var l net.Listener = ln
	if wrap {
		l = edge.IdleUntilFirstByte(ln, idle)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// readOne reads one byte within d: nil when the server sent one, io.EOF
// when it closed the connection, os.ErrDeadlineExceeded when it did
// neither.
func readOne(t *testing.T, c net.Conn, d time.Duration) error {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	_, err := c.Read(b[:])
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return os.ErrDeadlineExceeded
	}
	return err
}

const request = "POST /v1/allow HTTP/1.1\r\nHost: limiter\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

// A pooling client opens a connection and sends on it later: net/http alone
// closes it after ReadHeaderTimeout, which fails the request the client
// sends at that moment; through IdleUntilFirstByte it stays open and its
// request is answered.
func TestSilentConnectionWaitsForItsFirstRequest(t *testing.T) {
	const readHeader = 50 * time.Millisecond
	for _, tc := range []struct {
		name       string
		wrap       bool
		wantClosed bool
	}{
		{"net/http alone closes it", false, true},
		{"IdleUntilFirstByte keeps it", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", serveOK(t, tc.wrap, readHeader, 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// Ten times the header timeout without a byte either way.
			err = readOne(t, c, 10*readHeader)
			if closed := errors.Is(err, io.EOF); closed != tc.wantClosed {
				t.Fatalf("silent for %v: read %v; want the server to have closed the connection: %v", 10*readHeader, err, tc.wantClosed)
			}
			if tc.wantClosed {
				return
			}
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("silent for %v: read %v; want nothing", 10*readHeader, err)
			}
			if _, err := io.WriteString(c, request); err != nil {
				t.Fatal(err)
			}
			if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("the request on the connection kept open: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %s; want 200", resp.Status)
			}
		})
	}
}

// Once the first byte has come, ReadHeaderTimeout applies as before: a
// client dribbling its header is cut off.
func TestHeaderTimeoutCountsFromTheFirstByte(t *testing.T) {
	const readHeader = 100 * time.Millisecond
	c, err := net.Dial("tcp", serveOK(t, true, readHeader, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := readOne(t, c, 3*readHeader); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("silent for %v: read %v; want the connection open", 3*readHeader, err)
	}
	if _, err := io.WriteString(c, "POST /v1/allow HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	first := time.Now()
	if err := readOne(t, c, 5*time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("half a header: read %v; want the server to close the connection", err)
	}
	if took := time.Since(first); took < readHeader {
		t.Fatalf("closed %v after the first byte; want at least ReadHeaderTimeout %v", took, readHeader)
	}
}

// A connection that never sends is closed after the idle timeout, as a
// kept-alive one is.
func TestSilentConnectionClosedAfterIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	c, err := net.Dial("tcp", serveOK(t, true, 50*time.Millisecond, idle))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if err := readOne(t, c, 5*time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("silent: read %v; want the server to close the connection", err)
	}
	if took := time.Since(start); took < idle {
		t.Fatalf("closed after %v; want at least the idle timeout %v", took, idle)
	}
}
