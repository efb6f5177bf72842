package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/internal/testserver"
)

// Stopping drains: /readyz fails at once with reason "shutting down" while
// checks are still answered for --shutdown-delay, then the listener
// closes and the stop returns.
func TestGracefulDrain(t *testing.T) {
	o := testOptions(t, "", "", t.TempDir())
	o.ShutdownDelay = 2 * time.Second
	d := startDaemon(t, o)
	d.mustCall(t, "GET", "/readyz", "", false, 200)

	app := d.app
	d.app = nil // stopped here, not by the cleanup
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	t0 := time.Now()
	go func() { stopped <- app.Stop(ctx) }()

	testserver.WaitFor(t, 5*time.Second, 10*time.Millisecond, func() error {
		r := d.call(t, "GET", "/readyz", "", false)
		if r.status != 503 || r.body["reason"] != "shutting down" {
			return fmt.Errorf("/readyz while stopping: %d %s", r.status, r.raw)
		}
		return nil
	})
	r := d.mustCall(t, "POST", "/v1/allow", `{"key":"acct_drain"}`, false, 200)
	if r.body["allowed"] != true {
		t.Fatalf("check while draining: %s", r.raw)
	}
	if !r.closed {
		t.Fatal("answer while draining lacks Connection: close: the client would keep the connection")
	}
	if time.Since(t0) >= o.ShutdownDelay {
		t.Fatalf("the checks above took longer than the shutdown delay (%v): the test proves nothing", o.ShutdownDelay)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	if took := time.Since(t0); took < o.ShutdownDelay {
		t.Fatalf("stopped after %v, before the shutdown delay of %v", took, o.ShutdownDelay)
	}
	resp, err := http.Get(d.base + "/healthz")
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		t.Fatalf("/healthz answers %s after the stop", resp.Status)
	}
	if !strings.Contains(err.Error(), "refused") {
		t.Logf("after the stop: %v", err)
	}
}
