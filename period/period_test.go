package period

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	l, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestBounds(t *testing.T) {
	paris := mustZone(t, "Europe/Paris")
	kolkata := mustZone(t, "Asia/Kolkata")
	ny := mustZone(t, "America/New_York")
	santiago := mustZone(t, "America/Santiago")
	at := func(loc *time.Location, s string) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04:05", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		name       string
		cal        Calendar
		unit       Unit
		t          time.Time
		start, end time.Time
		hours      float64 // the period's length
	}{
		{"utc hour", Calendar{}, Hour, at(time.UTC, "2026-12-02 07:59:59"), at(time.UTC, "2026-12-02 07:00:00"), at(time.UTC, "2026-12-02 08:00:00"), 1},
		{"kolkata hour starts at half past UTC", Calendar{Location: kolkata}, Hour, at(kolkata, "2026-12-02 10:15:00"),
			at(kolkata, "2026-12-02 10:00:00"), at(kolkata, "2026-12-02 11:00:00"), 1},
		{"utc day", Calendar{}, Day, at(time.UTC, "2026-12-02 23:59:59"), at(time.UTC, "2026-12-02 00:00:00"), at(time.UTC, "2026-12-03 00:00:00"), 24},
		{"paris day, summer time begins: 23 h", Calendar{Location: paris}, Day, at(paris, "2026-03-29 12:00:00"),
			at(paris, "2026-03-29 00:00:00"), at(paris, "2026-03-30 00:00:00"), 23},
		{"paris day, summer time ends: 25 h", Calendar{Location: paris}, Day, at(paris, "2026-10-25 01:30:00"),
			at(paris, "2026-10-25 00:00:00"), at(paris, "2026-10-26 00:00:00"), 25},
		{"paris day is not the utc day", Calendar{Location: paris}, Day, at(time.UTC, "2026-12-02 23:30:00"),
			at(paris, "2026-12-03 00:00:00"), at(paris, "2026-12-04 00:00:00"), 24},
		{"santiago: the clock jumps from 24:00 to 01:00, the day starts at 01:00", Calendar{Location: santiago}, Day, at(santiago, "2026-09-06 12:00:00"),
			at(santiago, "2026-09-06 01:00:00"), at(santiago, "2026-09-07 00:00:00"), 23},
		{"santiago: the day before ends at the jump", Calendar{Location: santiago}, Day, at(santiago, "2026-09-05 23:59:59"),
			at(santiago, "2026-09-05 00:00:00"), at(santiago, "2026-09-06 01:00:00"), 24},
		{"new york hour across the fall-back", Calendar{Location: ny}, Hour, at(time.UTC, "2026-11-01 06:30:00"),
			at(time.UTC, "2026-11-01 06:00:00"), at(time.UTC, "2026-11-01 07:00:00"), 1},
		{"iso week from monday", Calendar{}, Week, at(time.UTC, "2026-12-06 23:00:00"), // a Sunday
			at(time.UTC, "2026-11-30 00:00:00"), at(time.UTC, "2026-12-07 00:00:00"), 168},
		{"iso week across the new year", Calendar{}, Week, at(time.UTC, "2027-01-01 12:00:00"), // a Friday
			at(time.UTC, "2026-12-28 00:00:00"), at(time.UTC, "2027-01-04 00:00:00"), 168},
		{"paris week with the clock change", Calendar{Location: paris}, Week, at(paris, "2026-10-25 12:00:00"),
			at(paris, "2026-10-19 00:00:00"), at(paris, "2026-10-26 00:00:00"), 169},
		{"month from the 1st", Calendar{}, Month, at(time.UTC, "2026-02-28 23:59:59"),
			at(time.UTC, "2026-02-01 00:00:00"), at(time.UTC, "2026-03-01 00:00:00"), 28 * 24},
		{"month of 31 days", Calendar{AnchorDay: 1}, Month, at(time.UTC, "2026-12-31 12:00:00"),
			at(time.UTC, "2026-12-01 00:00:00"), at(time.UTC, "2027-01-01 00:00:00"), 31 * 24},
		{"anchor 15, before it", Calendar{AnchorDay: 15}, Month, at(time.UTC, "2026-12-14 23:59:59"),
			at(time.UTC, "2026-11-15 00:00:00"), at(time.UTC, "2026-12-15 00:00:00"), 30 * 24},
		{"anchor 15, on it", Calendar{AnchorDay: 15}, Month, at(time.UTC, "2026-12-15 00:00:00"),
			at(time.UTC, "2026-12-15 00:00:00"), at(time.UTC, "2027-01-15 00:00:00"), 31 * 24},
		{"anchor 31 in february: the 28th", Calendar{AnchorDay: 31}, Month, at(time.UTC, "2026-03-01 00:00:00"),
			at(time.UTC, "2026-02-28 00:00:00"), at(time.UTC, "2026-03-31 00:00:00"), 31 * 24},
		{"anchor 31 before february's last day", Calendar{AnchorDay: 31}, Month, at(time.UTC, "2026-02-27 12:00:00"),
			at(time.UTC, "2026-01-31 00:00:00"), at(time.UTC, "2026-02-28 00:00:00"), 28 * 24},
		{"anchor 30 in a leap february: the 29th", Calendar{AnchorDay: 30}, Month, at(time.UTC, "2028-02-29 00:00:00"),
			at(time.UTC, "2028-02-29 00:00:00"), at(time.UTC, "2028-03-30 00:00:00"), 30 * 24},
		{"anchor 31 in april: the 30th", Calendar{AnchorDay: 31}, Month, at(time.UTC, "2026-04-30 08:00:00"),
			at(time.UTC, "2026-04-30 00:00:00"), at(time.UTC, "2026-05-31 00:00:00"), 31 * 24},
		{"paris month with the spring change", Calendar{Location: paris}, Month, at(paris, "2026-03-31 23:59:59"),
			at(paris, "2026-03-01 00:00:00"), at(paris, "2026-04-01 00:00:00"), 31*24 - 1},
		{"paris month, utc instant in the next local month", Calendar{Location: paris}, Month, at(time.UTC, "2026-11-30 23:30:00"),
			at(paris, "2026-12-01 00:00:00"), at(paris, "2027-01-01 00:00:00"), 31 * 24},
		{"month across the year, anchor 10", Calendar{AnchorDay: 10}, Month, at(time.UTC, "2027-01-05 00:00:00"),
			at(time.UTC, "2026-12-10 00:00:00"), at(time.UTC, "2027-01-10 00:00:00"), 31 * 24},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start, end := tc.cal.Bounds(tc.unit, tc.t)
			if !start.Equal(tc.start) || !end.Equal(tc.end) {
				t.Fatalf("Bounds(%s, %v) = [%v, %v), want [%v, %v)", tc.unit, tc.t, start, end, tc.start, tc.end)
			}
			if h := end.Sub(start).Hours(); h != tc.hours {
				t.Fatalf("period of %v h, want %v", h, tc.hours)
			}
		})
	}
}

// TestBoundsTile: over random instants in several zones and anchors, every
// period holds its instant, the next period starts where it ends and the
// previous one ends where it starts: periods tile time with no gap or
// overlap.
func TestBoundsTile(t *testing.T) {
	zones := []string{"UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata", "Asia/Kathmandu", "Australia/Sydney", "America/Santiago", "Pacific/Chatham"}
	rng := rand.New(rand.NewPCG(1, 2))
	from := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	span := int64(4 * 365 * 24 * 3600)
	for _, z := range zones {
		cal := Calendar{Location: mustZone(t, z)}
		for i := 0; i < 2000; i++ {
			cal.AnchorDay = 1 + rng.IntN(31)
			at := time.Unix(from+rng.Int64N(span), rng.Int64N(1e9))
			for _, u := range Units {
				start, end := cal.Bounds(u, at)
				if at.Before(start) || !at.Before(end) {
					t.Fatalf("%s %s anchor %d: %v not in [%v, %v)", z, u, cal.AnchorDay, at, start, end)
				}
				if ns, _ := cal.Bounds(u, end); !ns.Equal(end) {
					t.Fatalf("%s %s anchor %d: the period after [%v, %v) starts at %v", z, u, cal.AnchorDay, start, end, ns)
				}
				if _, pe := cal.Bounds(u, start.Add(-time.Nanosecond)); !pe.Equal(start) {
					t.Fatalf("%s %s anchor %d: the period before [%v, %v) ends at %v", z, u, cal.AnchorDay, start, end, pe)
				}
			}
		}
	}
}

func TestNewCalendar(t *testing.T) {
	for _, tc := range []struct {
		zone   string
		anchor int
		want   string // "" = valid
	}{
		{"", 0, ""},
		{"Europe/Paris", 31, ""},
		{"Mars/Olympus", 1, "time_zone"},
		{"Local", 1, "time_zone"},
		{"UTC", 32, "anchor_day"},
		{"UTC", -1, "anchor_day"},
	} {
		_, err := NewCalendar(tc.zone, tc.anchor)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q %d: %v", tc.zone, tc.anchor, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q %d: err %v, want one naming %s", tc.zone, tc.anchor, err, tc.want)
		}
	}
	if _, err := ParseUnit("fortnight"); err == nil {
		t.Error("ParseUnit accepted fortnight")
	}
}

func BenchmarkBounds(b *testing.B) {
	cal := Calendar{Location: time.UTC, AnchorDay: 15}
	at := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	for _, u := range Units {
		b.Run(string(u), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				cal.Bounds(u, at)
			}
		})
	}
}
