package limit_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/quotaplatform/quota/limit"
	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region/store"
)

// fieldOf is the Field of err's first *limit.FieldError, or "" when err
// has none.
func fieldOf(err error) string {
	var fe *limit.FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}

func quotas(t *testing.T, qs ...limit.Quota) [store.MaxQuotaPeriods]limit.Quota {
	t.Helper()
	out, err := limit.NewQuotas(qs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPlanValidate: every rule of a plan, each bad plan refused with a
// *FieldError naming the field, wrapping ErrInvalidPlan, whose message
// names the field too.
func TestPlanValidate(t *testing.T) {
	day := limit.Quota{Period: period.Day, Limit: 10}
	month := limit.Quota{Period: period.Month, Limit: 100}
	cases := []struct {
		name  string
		plan  limit.Plan
		field string // "" = valid
	}{
		{"ordinary", limit.Plan{Rate: 100, Capacity: 200}, ""},
		{"slowest and smallest", limit.Plan{Rate: limit.MinRate, Capacity: 1}, ""},
		{"fastest and largest", limit.Plan{Rate: limit.MaxRate, Capacity: limit.MaxCapacity}, ""},
		{"zero rate", limit.Plan{Rate: 0, Capacity: 1}, "rate"},
		{"negative rate", limit.Plan{Rate: -1, Capacity: 1}, "rate"},
		{"rate below the minimum", limit.Plan{Rate: limit.MinRate / 2, Capacity: 1}, "rate"},
		{"denormal rate", limit.Plan{Rate: math.SmallestNonzeroFloat64, Capacity: 1}, "rate"},
		{"rate above the maximum", limit.Plan{Rate: 2 * limit.MaxRate, Capacity: 1}, "rate"},
		{"NaN rate", limit.Plan{Rate: math.NaN(), Capacity: 1}, "rate"},
		{"infinite rate", limit.Plan{Rate: math.Inf(1), Capacity: 1}, "rate"},
		{"capacity below 1", limit.Plan{Rate: 1, Capacity: 0.5}, "capacity"},
		{"capacity above the maximum", limit.Plan{Rate: 1, Capacity: 2 * limit.MaxCapacity}, "capacity"},
		{"NaN capacity", limit.Plan{Rate: 1, Capacity: math.NaN()}, "capacity"},
		{"every policy and mode", limit.Plan{Rate: 1, Capacity: 1, FailurePolicy: limit.FailOpen, Shadow: true, Concurrency: 3}, ""},
		{"exact, closed", limit.Plan{Rate: 1, Capacity: 1, Mode: limit.ModeExact, FailurePolicy: limit.FailClosed}, ""},
		{"unknown failure policy", limit.Plan{Rate: 1, Capacity: 1, FailurePolicy: "sometimes"}, "failure_policy"},
		{"unknown mode", limit.Plan{Rate: 1, Capacity: 1, Mode: "approximate"}, "mode"},
		{"exact but open", limit.Plan{Rate: 1, Capacity: 1, Mode: limit.ModeExact, FailurePolicy: limit.FailOpen}, "failure_policy"},
		{"exact but degraded", limit.Plan{Rate: 1, Capacity: 1, Mode: limit.ModeExact, FailurePolicy: limit.FailDegraded}, "failure_policy"},
		{"negative concurrency", limit.Plan{Rate: 1, Capacity: 1, Concurrency: -1}, "concurrency"},
		{"concurrency above the maximum", limit.Plan{Rate: 1, Capacity: 1, Concurrency: limit.MaxConcurrency + 1}, "concurrency"},
		{"quotas in a calendar", limit.Plan{Rate: 1, Capacity: 1, Quotas: quotas(t, month, day), TimeZone: "Europe/Paris", AnchorDay: 15}, ""},
		{"quotas out of order", limit.Plan{Rate: 1, Capacity: 1, Quotas: [store.MaxQuotaPeriods]limit.Quota{month, day}}, "quotas"},
		{"a gap in the quotas", limit.Plan{Rate: 1, Capacity: 1, Quotas: [store.MaxQuotaPeriods]limit.Quota{day, {}, month}}, "quotas"},
		{"quota limit zero", limit.Plan{Rate: 1, Capacity: 1, Quotas: [store.MaxQuotaPeriods]limit.Quota{{Period: period.Day}}}, "quotas[0].limit"},
		{"quota period unknown", limit.Plan{Rate: 1, Capacity: 1, Quotas: [store.MaxQuotaPeriods]limit.Quota{{Period: "fortnight", Limit: 1}}}, "quotas[0].period"},
		{"quotas on an exact plan", limit.Plan{Rate: 1, Capacity: 1, Mode: limit.ModeExact, Quotas: quotas(t, day)}, "quotas"},
		{"unknown time zone", limit.Plan{Rate: 1, Capacity: 1, TimeZone: "Mars/Olympus"}, "time_zone"},
		{"anchor day 32", limit.Plan{Rate: 1, Capacity: 1, Quotas: quotas(t, month), AnchorDay: 32}, "anchor_day"},
		{"negative anchor day", limit.Plan{Rate: 1, Capacity: 1, AnchorDay: -1}, "anchor_day"},
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
			if !errors.Is(err, limit.ErrInvalidPlan) || fieldOf(err) != tc.field || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Validate() = %v (field %q), want ErrInvalidPlan naming %s", err, fieldOf(err), tc.field)
			}
		})
	}
}

// TestNewQuotas: quotas come back shortest period first; a bad one is
// named by its place in the input.
func TestNewQuotas(t *testing.T) {
	day := limit.Quota{Period: period.Day, Limit: 10}
	hour := limit.Quota{Period: period.Hour, Limit: 1}
	cases := []struct {
		name  string
		in    []limit.Quota
		want  []limit.Quota
		field string // "" = valid
	}{
		{"none", nil, []limit.Quota{}, ""},
		{"ordered", []limit.Quota{day, hour}, []limit.Quota{hour, day}, ""},
		{"largest limit", []limit.Quota{{Period: period.Week, Limit: limit.MaxQuota}}, []limit.Quota{{Period: period.Week, Limit: limit.MaxQuota}}, ""},
		{"a period twice", []limit.Quota{day, hour, day}, nil, "quotas[2].period"},
		{"limit above the maximum", []limit.Quota{hour, {Period: period.Day, Limit: limit.MaxQuota + 1}}, nil, "quotas[1].limit"},
		{"too many", []limit.Quota{hour, day, hour, day, hour}, nil, "quotas"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := limit.NewQuotas(tc.in)
			if tc.field != "" {
				if !errors.Is(err, limit.ErrInvalidPlan) || fieldOf(err) != tc.field {
					t.Fatalf("NewQuotas() = %v (field %q), want field %s", err, fieldOf(err), tc.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p := limit.Plan{Quotas: got}
			if list := p.QuotaList(); len(list) != len(tc.want) || (len(list) > 0 && list[0] != tc.want[0]) || !p.HasQuotas() != (len(tc.want) == 0) {
				t.Fatalf("QuotaList() = %v, want %v", list, tc.want)
			}
		})
	}
}

// TestPolicyDefaults: a plan's policy defaults by its mode, and every
// listed policy and mode is valid while the zero values and others are
// not.
func TestPolicyDefaults(t *testing.T) {
	cases := []struct {
		plan limit.Plan
		want limit.FailurePolicy
	}{
		{limit.Plan{}, limit.FailDegraded},
		{limit.Plan{Mode: limit.ModeLeased}, limit.FailDegraded},
		{limit.Plan{Mode: limit.ModeExact}, limit.FailClosed},
		{limit.Plan{FailurePolicy: limit.FailOpen}, limit.FailOpen},
	}
	for _, tc := range cases {
		if got := tc.plan.Policy(); got != tc.want {
			t.Errorf("%+v.Policy() = %q, want %q", tc.plan, got, tc.want)
		}
	}
	for _, f := range limit.FailurePolicies {
		if !f.Valid() {
			t.Errorf("%q.Valid() = false", f)
		}
	}
	for _, m := range limit.Modes {
		if !m.Valid() {
			t.Errorf("%q.Valid() = false", m)
		}
	}
	if limit.FailurePolicy("").Valid() || limit.FailurePolicy("sometimes").Valid() || limit.Mode("").Valid() || limit.Mode("approximate").Valid() {
		t.Error("an unlisted policy or mode is valid")
	}
}

// TestCheckName: names follow the key rule and errors name the field.
func TestCheckName(t *testing.T) {
	errKind := errors.New("invalid name")
	cases := []struct {
		name string
		s    string
		ok   bool
		text string // in the message when not ok
	}{
		{"printable", "tenant-1:/v1", true, ""},
		{"longest", strings.Repeat("k", store.MaxKeyLen), true, ""},
		{"empty", "", false, "plan must not be empty"},
		{"too long", strings.Repeat("k", store.MaxKeyLen+1), false, "at most 512 allowed"},
		{"space", "a b", false, "plan byte 1 (0x20)"},
		{"non-ASCII", "é", false, "plan byte 0 (0xc3)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := limit.CheckName(errKind, "plan", tc.s)
			if tc.ok != (err == nil) {
				t.Fatalf("CheckName(%q) = %v", tc.s, err)
			}
			if tc.ok {
				return
			}
			if !errors.Is(err, errKind) || fieldOf(err) != "plan" || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("CheckName(%q) = %v, want %s wrapping the kind", tc.s, err, tc.text)
			}
			if kerr := limit.CheckKey(tc.s); !errors.Is(kerr, limit.ErrInvalidKey) || fieldOf(kerr) != "key" {
				t.Fatalf("CheckKey(%q) = %v, want ErrInvalidKey naming key", tc.s, kerr)
			}
		})
	}
}

// TestStaticPlans: a configured key gets its plan, another the default,
// and without a default an unknown key is ErrUnknownPlan.
func TestStaticPlans(t *testing.T) {
	gold, std := limit.Plan{Name: "gold", Rate: 10, Capacity: 10}, limit.Plan{Name: "std", Rate: 1, Capacity: 1}
	s := limit.StaticPlans{Default: std, Keys: map[string]limit.Plan{"k1": gold}}
	if p, err := s.Plan("k1"); err != nil || p != gold {
		t.Fatalf("Plan(k1) = %v, %v", p, err)
	}
	if p, err := s.Plan("k2"); err != nil || p != std {
		t.Fatalf("Plan(k2) = %v, %v", p, err)
	}
	if _, err := (limit.StaticPlans{}).Plan("k2"); !errors.Is(err, limit.ErrUnknownPlan) {
		t.Fatalf("Plan without default = %v, want ErrUnknownPlan", err)
	}
}
