package multiregion

import (
	"net/http"
	"testing"
	"time"
)

func TestHarnessSmoke(t *testing.T) {
	requireMode(t)
	c := Start(t, DefaultSpec())
	// NATS runs the shipped configuration with authentication on: Start
	// has checked it already (no stranger connects, limiter-<a> cannot
	// report as region b); checked again here so that the smoke test says
	// so.
	if err := c.nats.checkAuth(); err != nil {
		t.Fatal(err)
	}
	c.SetPlan("smoke", 50, 100)
	c.AssignKey("smoke-key", "smoke")
	c.WaitPlan(20*time.Second, 50, 100, "smoke-key")
	// Only the control-plane limiter writes the catalogue: every other one
	// answers 403 (its NATS user could not write the bucket anyway).
	for _, n := range c.Nodes() {
		if n.ControlPlane() {
			continue
		}
		code, err := c.PutTo(n, "/v1/limits/smoke", map[string]float64{"rate": 1e6, "capacity": 1e6})
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusForbidden {
			t.Errorf("%s: PUT /v1/limits/smoke answered %d, want 403 (not the control plane)", n.Name(), code)
		}
	}
	c.WaitPlan(5*time.Second, 50, 100, "smoke-key")
	for _, n := range c.Nodes() {
		m, err := c.Metrics(n)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s version %v", n.Name(), m.Sum("quota_config_version"))
	}
}
