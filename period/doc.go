// Package period computes the calendar periods of a plan's quotas: the
// hour, day, ISO week or month (anchored on a day of the month) that an
// instant falls in, in the plan's time zone.
//
// A quota ("1,000,000 a month") counts what a key spent from its period's
// start to its end, and its reset is the end; customers read both in their
// own zone, so periods follow the zone's calendar: a day is 23 or 25 hours
// long on the days its zone changes to or from daylight-saving time, a
// month of cost is 28 to 31 days, and a month anchored on the 31st starts
// on the last day of the shorter months. Hours follow the zone's clock
// (a zone 5:30 ahead of UTC starts its hours at half past).
//
// The package is pure: no clock, no I/O; callers pass the instant.
package period
