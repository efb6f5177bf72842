package testserver

import (
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago,
// and that this process has not handed out before.
//
// It is taken below Linux's ephemeral range (32768–60999), not from it:
// a port from the ephemeral range can be taken, between this call and the
// server's bind, as the local port of any outgoing connection on the
// machine (a clean-clone CI run lost a limiter of the harness that way:
// "bind: address already in use").
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 200 {
		port := portLow + rand.IntN(portHigh-portLow)
		if portsGiven[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken
		}
		l.Close()
		portsGiven[port] = true
		return port
	}
	t.Fatalf("testserver: no free port in [%d, %d) after 200 tries", portLow, portHigh)
	return 0
}

// The range FreePort draws from: below the ephemeral range, above the
// ports services usually listen on.
const portLow, portHigh = 20000, 32768

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{} // guarded by portsMu
)

// WaitFor polls cond every interval until it returns nil or timeout passes,
// then fails the test with cond's last error. It is the way to wait for an
// event that cannot be awaited directly; it never sleeps longer than needed.
func WaitFor(t testing.TB, timeout, interval time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testserver: condition not met within %v: %v", timeout, err)
		}
		time.Sleep(interval)
	}
}

// RequireBinary fails the test when name is not on PATH, naming the Debian
// package that provides it.
func RequireBinary(t testing.TB, name, debianPackage string) string {
	t.Helper()
	path, err := lookPath(name)
	if err != nil {
		t.Fatalf("testserver: %s not found on PATH: install the Debian package %q (apt-get install -y %s)", name, debianPackage, debianPackage)
	}
	return path
}
