package migrations_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/migrations"
	"github.com/quotaplatform/quota/period"
)

// boundsCase is one question to both calendars.
type boundsCase struct {
	unit   period.Unit
	zone   string
	anchor int
	at     time.Time
}

// boundsInstants are the instants asked in zone: a sweep of 2023-12 to
// 2028-04 (leap Februaries 2024 and 2028, plain ones between) at an odd
// step, and around each of the zone's offset changes and each period
// boundary Go computes (a second and an hour either side), where a
// difference would show.
func boundsInstants(t *testing.T, zone string, anchors []int) []time.Time {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	from, to := time.Date(2023, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 4, 1, 0, 0, 0, 0, time.UTC)
	var out []time.Time
	near := func(x time.Time) {
		for _, d := range []time.Duration{-time.Hour, -time.Second, 0, time.Second, time.Hour} {
			out = append(out, x.Add(d))
		}
	}
	for at := from; at.Before(to); at = at.Add(13*time.Hour + 7*time.Minute + 11*time.Second) {
		out = append(out, at)
	}
	_, prev := from.In(loc).Zone()
	for at := from; at.Before(to); at = at.Add(15 * time.Minute) {
		if _, off := at.In(loc).Zone(); off != prev {
			near(at)
			prev = off
		}
	}
	for _, a := range anchors {
		cal := period.Calendar{Location: loc, AnchorDay: a}
		for at := from; at.Before(to); {
			_, end := cal.Bounds(period.Month, at)
			near(end)
			at = end
		}
	}
	day := period.Calendar{Location: loc}
	for at := from; at.Before(to); {
		_, end := day.Bounds(period.Day, at)
		if end.Day() == 1 || end.In(loc).Hour() != 0 || end.In(loc).Minute() != 0 {
			near(end) // the first of a month, and every day that does not start at 00:00
		}
		at = end
	}
	return out
}

// quota_period_bounds answers exactly what period.Calendar.Bounds does,
// over zones with DST (Santiago's midnight jump, Lord Howe's half hour,
// Chatham's +12:45, Kolkata's +5:30, Havana's midnight that happens twice),
// every unit, anchor days 1, 15, 29, 30 and 31 (and 0), and leap and plain
// Februaries.
func TestPeriodBoundsMatchGo(t *testing.T) {
	url := testserver.NewDatabase(t)
	ctx := context.Background()
	if _, err := migrations.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The session's zone must not matter.
	if _, err := conn.Exec(ctx, "SET TimeZone = 'Pacific/Kiritimati'"); err != nil {
		t.Fatal(err)
	}
	zones := []string{"UTC", "", "Europe/Paris", "America/New_York", "America/Santiago", "Australia/Lord_Howe",
		"Asia/Kolkata", "Pacific/Chatham", "America/Havana"}
	anchors := []int{0, 1, 15, 29, 30, 31}
	for _, zone := range zones {
		t.Run(zone, func(t *testing.T) {
			name := zone
			if name == "" {
				name = "UTC"
			}
			var cases []boundsCase
			for _, at := range boundsInstants(t, name, anchors) {
				for _, u := range []period.Unit{period.Hour, period.Day, period.Week} {
					cases = append(cases, boundsCase{u, zone, 0, at})
				}
				for _, a := range anchors {
					cases = append(cases, boundsCase{period.Month, zone, a, at})
				}
			}
			compareBounds(t, conn, cases)
		})
	}
}

// compareBounds asks Postgres every case in one query and compares each
// answer with Go's.
func compareBounds(t *testing.T, conn *pgx.Conn, cases []boundsCase) {
	t.Helper()
	units, zones, anchors, ats := make([]string, len(cases)), make([]string, len(cases)), make([]int32, len(cases)), make([]time.Time, len(cases))
	for i, c := range cases {
		units[i], zones[i], anchors[i], ats[i] = string(c.unit), c.zone, int32(c.anchor), c.at
	}
	rows, err := conn.Query(context.Background(), `SELECT b.period_start, b.period_end
		FROM unnest($1::text[], $2::text[], $3::int[], $4::timestamptz[]) WITH ORDINALITY AS c(unit, zone, anchor, at, i)
		CROSS JOIN LATERAL quota_period_bounds(c.unit, c.zone, c.anchor, c.at) b
		ORDER BY c.i`, units, zones, anchors, ats)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i, failures := 0, 0
	for rows.Next() {
		var start, end time.Time
		if err := rows.Scan(&start, &end); err != nil {
			t.Fatal(err)
		}
		c := cases[i]
		i++
		cal, err := period.NewCalendar(c.zone, c.anchor)
		if err != nil {
			t.Fatal(err)
		}
		ws, we := cal.Bounds(c.unit, c.at)
		if !start.Equal(ws) || !end.Equal(we) {
			failures++
			if failures <= 10 {
				t.Errorf("%s in %q anchor %d at %s (%s): SQL [%s, %s), Go [%s, %s)", c.unit, c.zone, c.anchor,
					c.at.UTC().Format(time.RFC3339), c.at.In(cal.Location).Format("2006-01-02 15:04:05 -07:00 Mon"),
					fmtIn(start, cal.Location), fmtIn(end, cal.Location), fmtIn(ws, cal.Location), fmtIn(we, cal.Location))
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if i != len(cases) {
		t.Fatalf("%d answers to %d cases", i, len(cases))
	}
	if failures > 0 {
		t.Fatalf("%d of %d cases differ", failures, len(cases))
	}
	t.Logf("%d cases agree", len(cases))
}

func fmtIn(x time.Time, loc *time.Location) string {
	return fmt.Sprintf("%s (%s)", x.UTC().Format(time.RFC3339), x.In(loc).Format("01-02 15:04 -07:00"))
}
