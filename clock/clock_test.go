package clock_test

import (
	"testing"
	"time"

	"github.com/quotaplatform/quota/clock"
)

var t0 = time.Unix(1_700_000_000, 0)

func recv(c <-chan time.Time) (time.Time, bool) {
	select {
	case t := <-c:
		return t, true
	default:
		return time.Time{}, false
	}
}

func TestManualTicker(t *testing.T) {
	tests := []struct {
		name    string
		advance []time.Duration
		want    []bool // a tick waiting after each advance
	}{
		{"before the period", []time.Duration{999 * time.Millisecond}, []bool{false}},
		{"at the period", []time.Duration{time.Second}, []bool{true}},
		{"twice", []time.Duration{time.Second, time.Second}, []bool{true, true}},
		{"half then half", []time.Duration{500 * time.Millisecond, 500 * time.Millisecond}, []bool{false, true}},
		{"several periods at once drop ticks", []time.Duration{5 * time.Second, 500 * time.Millisecond}, []bool{true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := clock.NewManual(t0)
			tk := m.NewTicker(time.Second)
			defer tk.Stop()
			for i, d := range tt.advance {
				m.Advance(d)
				if _, got := recv(tk.C()); got != tt.want[i] {
					t.Fatalf("after advance %d (%v): tick=%v, want %v", i, d, got, tt.want[i])
				}
			}
		})
	}
}

func TestManualTimerFiresOnceAndStops(t *testing.T) {
	m := clock.NewManual(t0)
	tm := m.NewTimer(time.Second)
	m.Advance(2 * time.Second)
	at, ok := recv(tm.C())
	if !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("timer fired %v at %v, want at %v", ok, at, t0.Add(time.Second))
	}
	m.Advance(time.Hour)
	if _, ok := recv(tm.C()); ok {
		t.Fatal("timer fired twice")
	}
	if tm.Stop() {
		t.Fatal("Stop reported stopping a timer that had fired")
	}
	tm2 := m.NewTimer(time.Second)
	if !tm2.Stop() {
		t.Fatal("Stop of a pending timer reported false")
	}
	m.Advance(time.Hour)
	if _, ok := recv(tm2.C()); ok {
		t.Fatal("stopped timer fired")
	}
	if n := m.Waiters(); n != 0 {
		t.Fatalf("Waiters = %d after every timer ended, want 0", n)
	}
}

func TestManualBlockUntil(t *testing.T) {
	m := clock.NewManual(t0)
	done := make(chan struct{})
	go func() {
		tk := m.NewTicker(time.Second)
		<-tk.C()
		tk.Stop()
		close(done)
	}()
	m.BlockUntil(1)
	m.Advance(time.Second)
	<-done
	if n := m.Waiters(); n != 0 {
		t.Fatalf("Waiters = %d after Stop, want 0", n)
	}
}

func TestSystemTicks(t *testing.T) {
	c := clock.System()
	tk := c.NewTicker(time.Millisecond)
	defer tk.Stop()
	<-tk.C()
	if c.Now().IsZero() {
		t.Fatal("system clock reads zero")
	}
}
