package region_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/quotaplatform/quota/region"
)

func TestPlanValidate(t *testing.T) {
	cases := []struct {
		name  string
		plan  region.Plan
		field string // "" = valid
	}{
		{"ordinary", region.Plan{Rate: 100, Capacity: 200}, ""},
		{"slowest and smallest", region.Plan{Rate: region.MinRate, Capacity: 1}, ""},
		{"fastest and largest", region.Plan{Rate: region.MaxRate, Capacity: region.MaxCapacity}, ""},
		{"zero rate", region.Plan{Rate: 0, Capacity: 1}, "rate"},
		{"negative rate", region.Plan{Rate: -1, Capacity: 1}, "rate"},
		{"rate below the minimum", region.Plan{Rate: region.MinRate / 2, Capacity: 1}, "rate"},
		{"denormal rate", region.Plan{Rate: math.SmallestNonzeroFloat64, Capacity: 1}, "rate"},
		{"rate above the maximum", region.Plan{Rate: 2 * region.MaxRate, Capacity: 1}, "rate"},
		{"NaN rate", region.Plan{Rate: math.NaN(), Capacity: 1}, "rate"},
		{"infinite rate", region.Plan{Rate: math.Inf(1), Capacity: 1}, "rate"},
		{"capacity below 1", region.Plan{Rate: 1, Capacity: 0.5}, "capacity"},
		{"capacity above the maximum", region.Plan{Rate: 1, Capacity: 2 * region.MaxCapacity}, "capacity"},
		{"NaN capacity", region.Plan{Rate: 1, Capacity: math.NaN()}, "capacity"},
		{"every policy and mode", region.Plan{Rate: 1, Capacity: 1, FailurePolicy: region.FailOpen, Shadow: true, Concurrency: 3}, ""},
		{"exact, closed", region.Plan{Rate: 1, Capacity: 1, Mode: region.ModeExact, FailurePolicy: region.FailClosed}, ""},
		{"unknown failure policy", region.Plan{Rate: 1, Capacity: 1, FailurePolicy: "sometimes"}, "failure_policy"},
		{"unknown mode", region.Plan{Rate: 1, Capacity: 1, Mode: "approximate"}, "mode"},
		{"exact but open", region.Plan{Rate: 1, Capacity: 1, Mode: region.ModeExact, FailurePolicy: region.FailOpen}, "failure_policy"},
		{"exact but degraded", region.Plan{Rate: 1, Capacity: 1, Mode: region.ModeExact, FailurePolicy: region.FailDegraded}, "failure_policy"},
		{"negative concurrency", region.Plan{Rate: 1, Capacity: 1, Concurrency: -1}, "concurrency"},
		{"concurrency above the maximum", region.Plan{Rate: 1, Capacity: 1, Concurrency: region.MaxConcurrency + 1}, "concurrency"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.plan.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, region.ErrInvalidPlan) || !strings.Contains(err.Error(), tc.field+" ") {
				t.Fatalf("Validate() = %v, want ErrInvalidPlan naming %s", err, tc.field)
			}
		})
	}
}
