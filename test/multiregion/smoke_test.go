package multiregion

import (
	"testing"
	"time"
)

func TestHarnessSmoke(t *testing.T) {
	requireMode(t)
	c := Start(t, DefaultSpec())
	c.SetPlan("smoke", 50, 100)
	c.AssignKey("smoke-key", "smoke")
	c.WaitPlan(20*time.Second, 50, 100, "smoke-key")
	for _, n := range c.Nodes() {
		m, err := c.Metrics(n)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s version %v", n.Name(), m.Sum("quota_config_version"))
	}
}
