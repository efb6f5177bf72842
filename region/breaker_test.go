package region

import (
	"fmt"
	"testing"
	"time"
)

// TestBreakerSteps walks the breaker through its states at fixed instants.
func TestBreakerSteps(t *testing.T) {
	ms := int64(time.Millisecond)
	var seen []BreakerState
	b := breaker{threshold: 2, cooldown: 100 * time.Millisecond, onChange: func(s BreakerState) { seen = append(seen, s) }}
	steps := []struct {
		at    int64
		do    string // "fail", "ok", "allow", "abandon"
		allow bool   // for "allow"
		state BreakerState
	}{
		{0, "allow", true, BreakerClosed},
		{1 * ms, "fail", false, BreakerClosed},
		{2 * ms, "fail", false, BreakerOpen},
		{50 * ms, "allow", false, BreakerOpen},      // cooling down
		{102 * ms, "allow", true, BreakerHalfOpen},  // the probe
		{103 * ms, "allow", false, BreakerHalfOpen}, // only one probe
		{104 * ms, "abandon", false, BreakerOpen},   // the probe made no call
		{105 * ms, "allow", true, BreakerHalfOpen},  // the next caller probes at once
		{106 * ms, "fail", false, BreakerOpen},      // probe failed: open again
		{150 * ms, "allow", false, BreakerOpen},
		{207 * ms, "allow", true, BreakerHalfOpen},
		{208 * ms, "ok", false, BreakerClosed},
	}
	for i, s := range steps {
		switch s.do {
		case "fail":
			b.failure(s.at)
		case "ok":
			b.success()
		case "abandon":
			b.abandon()
		case "allow":
			if got := b.allow(s.at); got != s.allow {
				t.Fatalf("step %d: allow = %v, want %v", i, got, s.allow)
			}
		}
		if got := b.current(); got != s.state {
			t.Fatalf("step %d: state %v, want %v", i, got, s.state)
		}
	}
	want := []BreakerState{BreakerOpen, BreakerHalfOpen, BreakerOpen, BreakerHalfOpen, BreakerOpen, BreakerHalfOpen, BreakerClosed}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("onChange saw %v, want %v", seen, want)
	}
}
