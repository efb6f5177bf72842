package period

import (
	"errors"
	"fmt"
	"time"
)

// Unit is the length of a calendar period.
type Unit string

// The units.
const (
	Hour  Unit = "hour"
	Day   Unit = "day"
	Week  Unit = "week" // ISO 8601: from Monday 00:00
	Month Unit = "month"
)

// Units are the known units, shortest first.
var Units = []Unit{Hour, Day, Week, Month}

// Calendar is where periods are counted: a time zone and the day of the
// month that months start on. The zero Calendar is UTC with months from
// the 1st.
type Calendar struct {
	// Location is the zone whose calendar the periods follow. Nil: UTC.
	Location *time.Location
	// AnchorDay is the day of the month a month starts on, 1 to 31; in a
	// month with fewer days it starts on the month's last day. 0: the 1st.
	AnchorDay int
}

// NewCalendar returns the calendar of the named IANA zone ("" is UTC) and
// anchor day (0 is the 1st); errors name the field.
func NewCalendar(zone string, anchorDay int) (Calendar, error) {
	var errs []error
	loc := time.UTC
	if zone != "" {
		l, err := time.LoadLocation(zone)
		if err != nil || zone == "Local" {
			errs = append(errs, fmt.Errorf("time_zone: %q is not an IANA time zone (e.g. Europe/Paris)", zone))
		} else {
			loc = l
		}
	}
	if anchorDay < 0 || anchorDay > 31 {
		errs = append(errs, fmt.Errorf("anchor_day: must be 1 to 31, got %d", anchorDay))
	}
	return Calendar{Location: loc, AnchorDay: anchorDay}, errors.Join(errs...)
}

// ParseUnit reads a unit's name.
func ParseUnit(s string) (Unit, error) {
	for _, u := range Units {
		if string(u) == s {
			return u, nil
		}
	}
	return "", fmt.Errorf("period: %q is not one of hour, day, week, month", s)
}

func (c Calendar) loc() *time.Location {
	if c.Location == nil {
		return time.UTC
	}
	return c.Location
}

func (c Calendar) anchor() int {
	if c.AnchorDay < 1 {
		return 1
	}
	return min(c.AnchorDay, 31)
}

// Bounds returns the period of unit u that t falls in, [start, end), as
// instants (in the calendar's location). An unknown unit gives zero times.
func (c Calendar) Bounds(u Unit, t time.Time) (start, end time.Time) {
	loc := c.loc()
	lt := t.In(loc)
	switch u {
	case Hour:
		// The zone's clock hour: offsets of whole quarter hours (+5:30,
		// +5:45) start their hours off the UTC hour.
		_, off := lt.Zone()
		sec := lt.Unix() + int64(off)
		start = time.Unix(sec-mod(sec, 3600)-int64(off), 0).In(loc)
		return start, start.Add(time.Hour)
	case Day:
		y, m, d := lt.Date()
		return midnight(y, m, d, loc), midnight(y, m, d+1, loc)
	case Week:
		y, m, d := lt.Date()
		back := (int(lt.Weekday()) + 6) % 7 // days since Monday
		return midnight(y, m, d-back, loc), midnight(y, m, d-back+7, loc)
	case Month:
		y, m, _ := lt.Date()
		this := c.monthStart(y, m)
		if lt.Before(this) {
			return c.monthStart(y, m-1), this
		}
		return this, c.monthStart(y, m+1)
	}
	return time.Time{}, time.Time{}
}

// monthStart is the anchor day of month m of year y (m may be out of
// 1..12: Go's normalization), at 00:00 in the calendar's zone.
func (c Calendar) monthStart(y int, m time.Month) time.Time {
	first := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC) // normalizes y, m
	y, m = first.Year(), first.Month()
	return midnight(y, m, min(c.anchor(), daysIn(y, m)), c.loc())
}

// midnight is the first instant of day d of month m of year y in loc (out
// of range values normalize as in time.Date). Where the zone's clock jumps
// over midnight (America/Santiago moves from 24:00 to 01:00), the day
// starts at the jump: time.Date would answer the instant an hour before,
// on the previous day's clock.
func midnight(y int, m time.Month, d int, loc *time.Location) time.Time {
	want := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if !sameDate(t.In(loc), want) {
		lt := t.In(loc)
		since := time.Duration(lt.Hour())*time.Hour + time.Duration(lt.Minute())*time.Minute + time.Duration(lt.Second())*time.Second
		t = t.Add(24*time.Hour - since)
	}
	return t
}

func sameDate(a, b time.Time) bool {
	ay, am, ad := a.Date()
	by, bm, bd := b.Date()
	return ay == by && am == bm && ad == bd
}

// daysIn is the number of days of month m of year y.
func daysIn(y int, m time.Month) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

func mod(a, b int64) int64 {
	r := a % b
	if r < 0 {
		r += b
	}
	return r
}
