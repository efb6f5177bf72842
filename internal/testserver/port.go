package testserver

import (
	"net"
	"testing"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testserver: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

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
