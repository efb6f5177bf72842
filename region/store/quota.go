package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotaplatform/quota/period"
)

// MaxQuotaPeriods is the most quotas one call (one plan) carries: one per
// period unit.
const MaxQuotaPeriods = 4

// QuotaStore is a region's quota counters (docs/design.md [quotas]): per
// key, quota period and region, what the region has spent and leased in
// the period. Processes lease quota permits from it as they lease rate
// permits from a Store's bucket. redisstore.Store and memstore.Store
// implement it and pass the same conformance suite. The Limiter calls it
// on the slow path of a plan with quotas.
type QuotaStore interface {
	// LeaseQuota applies one call to key's counters, atomically over all
	// of its periods: each counter first takes the call's base when it is
	// newer than the one it holds (and then holds at least the base's
	// region spend), takes back Return permits, and then every counter
	// grants the same number of permits, up to Want, within its region's
	// allowance: base region spend + share × (limit − base total). A
	// call grants nothing unless every counter can give at least Min. A
	// counter lives until QuotaTTL after its period's end.
	//
	// Time is the store's own (Redis' TIME; memstore's clock), never the
	// caller's. A period that has ended is still counted while its
	// counter lives: a call in flight across the period's end, or from a
	// caller whose clock is a little slow, is charged to the period it
	// names. A period whose counter's life is over (store time ≥ End +
	// QuotaTTL) can no longer be bounded, so the call grants nothing,
	// writes nothing to that period (its returns and charge are dropped:
	// the ledger has them), and reports the counter Ended. The call's
	// other periods still take their returns and charge.
	LeaseQuota(ctx context.Context, call QuotaCall) (QuotaReply, error)
}

// QuotaCall is one call to a key's quota counters.
type QuotaCall struct {
	Key     string
	Periods []QuotaPeriod // 1 to MaxQuotaPeriods, each Unit at most once
	Want    int64         // permits asked of every counter, ≥ 0
	Min     int64         // grant nothing unless every counter gives this many, in [0, Want]
	// Charge is cost spent without a grant (while the store was away, or
	// charged after the response): every counter adds it after its
	// returns and before the grant, even past its allowance. ≥ 0.
	Charge int64
	// NeedBase grants nothing while a counter holds no base after the
	// call (a new period, a new region, a store that lost its state): the
	// caller has a ledger to read one from, and a counter without one
	// would grant the region's share of the whole quota. Returns and the
	// charge still apply.
	NeedBase bool
}

// QuotaPeriod is one quota of a call: the current period of one of the
// plan's quotas, and what the region's counter needs of it.
type QuotaPeriod struct {
	Unit       period.Unit
	Start, End time.Time // the period, End after Start
	Limit      int64     // the quota, the fleet's in the period, ≥ 1
	Share      float64   // the region's share of what remains, in (0, 1]
	Return     int64     // permits granted in this period that go back, ≥ 0
	// Base, when set, is the ledger's spend in the period
	// (region.QuotaBases); a counter takes it when it is newer than its own.
	Base *QuotaBaseIn
}

// QuotaBaseIn is the part of a region.QuotaBase a counter keeps: the fleet's
// total, this region's, and when the ledger was read.
type QuotaBaseIn struct {
	Total, Region int64
	AsOf          time.Time
}

// QuotaReply is a call's outcome.
type QuotaReply struct {
	Granted  int64                         // permits granted by every counter
	Counters [MaxQuotaPeriods]QuotaCounter // per period of the call, in its order
}

// QuotaCounter is one counter after a call.
type QuotaCounter struct {
	Used      int64     // the region's spend and leases in the period
	Allowance int64     // what the region may reach: base region + share × (limit − base total), floored
	BaseAt    time.Time // when the base the counter holds was read; zero: none
	// Ended: the period's counter outlived QuotaTTL by the store's clock;
	// Used and Allowance are 0 and the call granted nothing.
	Ended bool
}

// Remaining is what the region may still lease in the period.
func (c QuotaCounter) Remaining() int64 { return max(0, c.Allowance-c.Used) }

// ErrInvalidQuotaCall: a QuotaCall's fields are out of range. It wraps
// ErrStoreRejected: the call is refused, the store is available.
var ErrInvalidQuotaCall = fmt.Errorf("%w: invalid quota call", ErrStoreRejected)

// Validate reports whether c is in range; a store calls it before
// anything else. Its errors wrap ErrInvalidQuotaCall and name the field.
func (c QuotaCall) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: "+format, append([]any{ErrInvalidQuotaCall, field}, args...)...))
	}
	if !validName(c.Key, MaxKeyLen) {
		bad("Key", "want 1 to %d bytes of printable ASCII without spaces, got %q", MaxKeyLen, c.Key)
	}
	if n := len(c.Periods); n < 1 || n > MaxQuotaPeriods {
		bad("Periods", "want 1 to %d, got %d", MaxQuotaPeriods, n)
	}
	if c.Want < 0 || c.Want > MaxCount {
		bad("Want", "want 0 to %d, got %d", int64(MaxCount), c.Want)
	}
	if c.Charge < 0 || c.Charge > MaxCount {
		bad("Charge", "want 0 to %d, got %d", int64(MaxCount), c.Charge)
	}
	if c.Min < 0 || c.Min > c.Want {
		bad("Min", "want 0 to Want (%d), got %d", c.Want, c.Min)
	}
	seen := map[period.Unit]bool{}
	for i, p := range c.Periods {
		f := fmt.Sprintf("Periods[%d]", i)
		if _, err := period.ParseUnit(string(p.Unit)); err != nil || seen[p.Unit] {
			bad(f+".Unit", "%q is not a unit, or appears twice", p.Unit)
		}
		seen[p.Unit] = true
		if !p.End.After(p.Start) || p.Start.Unix() < 0 {
			bad(f+".End", "must be after Start (%v), got %v", p.Start, p.End)
		}
		if p.Limit < 1 || p.Limit > MaxCount {
			bad(f+".Limit", "want 1 to %d, got %d", int64(MaxCount), p.Limit)
		}
		if !(p.Share > 0 && p.Share <= 1) {
			bad(f+".Share", "want (0, 1], got %v", p.Share)
		}
		if p.Return < 0 || p.Return > MaxCount {
			bad(f+".Return", "want 0 to %d, got %d", int64(MaxCount), p.Return)
		}
		if b := p.Base; b != nil && (b.Total < -MaxCount || b.Total > MaxCount || b.Region < -MaxCount || b.Region > MaxCount || b.AsOf.UnixMicro() <= 0) {
			bad(f+".Base", "total %d and region %d must be within ±(2^53 − 1), AsOf after 1970", b.Total, b.Region)
		}
	}
	return errors.Join(errs...)
}

// QuotaTTL is how long a counter lives after its period's end: long
// enough for the last reports and returns of the period, and for callers
// whose clocks lag the store's.
const QuotaTTL = 24 * time.Hour
