package limitmetrics_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/quotaplatform/quota/internal/limitmetrics"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/redisstore"
)

// TestPlanMetrics: shadow rejections are counted in quota_decisions_total
// and, with degraded decisions, in quota_plan_decisions_total by plan and
// the failure policy that applied. The store is a Redis client of a port
// nothing listens on: every call is refused.
func TestPlanMetrics(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	plans := region.StaticPlans{Keys: map[string]region.Plan{
		"s": {Name: "trial", Rate: 1, Capacity: 1, Shadow: true, FailurePolicy: region.FailDegraded},
		"c": {Name: "sms", Rate: 1, Capacity: 5, FailurePolicy: region.FailClosed},
		"o": {Name: "reads", Rate: 1, Capacity: 5, FailurePolicy: region.FailOpen},
	}}
	lim, err := region.New(redisstore.New(rdb, ""), plans, region.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 4 {
		for _, k := range []string{"s", "c", "o"} {
			if _, err := lim.Allow(ctx, k, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(limitmetrics.NewCollector(lim, nil))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		labels map[string]string
		want   float64
	}{
		// The shadow plan's degraded bucket holds 1: 3 of 4 would be rejected.
		{map[string]string{"plan": "trial", "failure_policy": "degraded", "result": "shadow_rejected"}, 3},
		{map[string]string{"plan": "trial", "failure_policy": "degraded", "result": "degraded_rejected"}, 3},
		{map[string]string{"plan": "trial", "failure_policy": "degraded", "result": "degraded_allowed"}, 1},
		{map[string]string{"plan": "sms", "failure_policy": "closed", "result": "degraded_rejected"}, 4},
		{map[string]string{"plan": "reads", "failure_policy": "open", "result": "degraded_allowed"}, 4},
	}
	for _, tt := range tests {
		if got := value(t, fams, "quota_plan_decisions_total", tt.labels); got != tt.want {
			t.Errorf("quota_plan_decisions_total%v = %v, want %v", tt.labels, got, tt.want)
		}
	}
	if got := value(t, fams, "quota_decisions_total", map[string]string{"result": "shadow_rejected"}); got != 3 {
		t.Errorf("quota_decisions_total{result=shadow_rejected} = %v, want 3", got)
	}
}
