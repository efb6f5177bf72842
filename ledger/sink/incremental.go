package sink

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/quotaplatform/quota/ledger/export"
)

// An incremental pass (Config.Incremental) reads only the keys that may
// have changed since the sink's checkpoint (billing_sinks, migration 017):
//
//   - keys with a row written by a transaction at or above the checkpoint
//     (usage_reports.changed_xid), among windows from the pass's reach less
//     one period on: the checkpoint is the oldest transaction running when
//     the previous pass started (pg_snapshot_xmin), so a row committed
//     during or after that pass, whatever its transaction's id, is read by
//     this one;
//   - keys with a window in a period that may have ended since the
//     previous pass's now (it was read open then);
//   - the sink's revisits: keys with a period that differed from what the
//     sink acknowledged, or that Config.Skip held back, after the previous
//     pass; and keys with an event not acknowledged.
//
// A key not among them has, by induction, every period as the last pass
// that read it left it: sent and acknowledged, or open. So the
// differences of the keys read are every difference of the sink. The
// first pass, a pass after one that failed, and (plan calendar) a pass
// after the catalogue's plans changed read every key.
type increment struct {
	next   string   // checkpoint to record once the pass succeeds
	digest string   // plans digest to record (plan calendar)
	keys   []string // nil: read every key
}

// plansDigestSQL fingerprints what cuts keys' plan periods: the
// catalogue's plans and key assignments as the reconciler mirrors them.
const plansDigestSQL = `SELECT md5(coalesce((SELECT string_agg(t::text, '|' ORDER BY t::text) FROM quota_plans t), '') ||
    '#' || coalesce((SELECT string_agg(t::text, '|' ORDER BY t::text) FROM quota_key_plans t), ''))`

// candidatesSQL: $1 checkpoint, $2 lowest window_start of a change read,
// $3 whether a period may have ended since the last pass, [$4, $5) the
// windows of such periods, $6 the sink.
const candidatesSQL = `SELECT key FROM usage_reports WHERE changed_xid >= $1::text::xid8 AND window_start >= $2
` + otherCandidatesSQL

// otherCandidatesSQL is the candidates besides the changed keys: keys
// with a period ended since the last pass, with a revisit, with an event
// not acknowledged.
const otherCandidatesSQL = `UNION SELECT key FROM usage_reports WHERE $3 AND window_start >= $4 AND window_start < $5
UNION SELECT key FROM billing_sink_revisits WHERE sink = $6
UNION SELECT key FROM billing_sink_events WHERE sink = $6 AND status <> 'sent'`

// carryCandidatesSQL is candidatesSQL for a pass that starts from the
// sink's stored carries (export.Query.Carry): the same keys, and it
// deletes the carries that a row written since the checkpoint makes
// stale (a row of the key before carried_at; see migration 021). A row
// written since by a transaction the pass that stored the carry could not
// see has an id at or above that pass's checkpoint, so the chain of
// checkpoints misses none.
const carryCandidatesSQL = `WITH ch AS MATERIALIZED (
    SELECT key, min(window_start) AS first, max(window_start) AS last
    FROM usage_reports WHERE changed_xid >= $1::text::xid8 GROUP BY key),
stale AS (
    DELETE FROM billing_sink_carries c USING ch WHERE c.sink = $6 AND c.key = ch.key AND ch.first < c.carried_at)
SELECT key FROM ch WHERE last >= $2
` + otherCandidatesSQL

// changes decides what the pass at now reading periods from from reads.
func (p *Publisher) changes(ctx context.Context, from, now time.Time) (*increment, error) {
	var prev, prevDigest *string
	var checked *time.Time
	inc := &increment{}
	digest := `''`
	if p.cfg.Calendar == export.CalendarPlan {
		digest = "(" + plansDigestSQL + ")"
	}
	err := p.db.QueryRow(ctx, `SELECT s.checkpoint_xid::text, s.checked_at, s.plans_digest,
    pg_snapshot_xmin(pg_current_snapshot())::text, `+digest+`
FROM billing_sinks s WHERE s.sink = $1`, p.cfg.Sink).Scan(&prev, &checked, &prevDigest, &inc.next, &inc.digest)
	if err != nil {
		return nil, fmt.Errorf("sink %q: read the checkpoint: %w", p.cfg.Sink, err)
	}
	if prev == nil || checked == nil || prevDigest == nil || *prevDigest != inc.digest {
		// Read everything. No checkpoint vouches for the stored carries
		// (the first pass, or the plans that cut periods changed): the
		// pass reads every key from its first report and stores them anew.
		if err := p.books.dropCarries(ctx); err != nil {
			return nil, err
		}
		return inc, nil
	}
	longest := longestPeriod(p.cfg.Granularity)
	ended := p.cfg.Granularity.Start(now).After(*checked)
	if p.cfg.Calendar == export.CalendarPlan {
		// A plan's period ends at a local midnight or clock hour: a UTC
		// quarter-hour in every zone in use.
		ended = now.Truncate(15 * time.Minute).After(*checked)
	}
	if inc.keys, err = p.books.changedKeys(ctx, *prev, from.Add(-longest), ended, checked.Add(-longest), now, p.cfg.Sink); err != nil {
		return nil, err
	}
	return inc, nil
}

// checkpoint records a successful pass: its checkpoint, its now, and the
// keys it must read again (revisit), replacing the revisits of the keys it
// read (read nil: every key).
func (b pgBooks) checkpoint(ctx context.Context, inc *increment, now time.Time, read, revisit []string) error {
	p := b.p
	slices.Sort(revisit)
	revisit = slices.Compact(revisit)
	if revisit == nil {
		revisit = []string{}
	}
	_, err := p.db.Exec(ctx, `WITH gone AS (
    DELETE FROM billing_sink_revisits WHERE sink = $1 AND ($2::text[] IS NULL OR key = ANY($2)) AND NOT key = ANY($3)),
added AS (
    INSERT INTO billing_sink_revisits (sink, key) SELECT $1, unnest($3::text[]) ON CONFLICT DO NOTHING)
UPDATE billing_sinks SET checkpoint_xid = $4::text::xid8, checked_at = $5, plans_digest = $6, updated_at = now()
WHERE sink = $1`, p.cfg.Sink, read, revisit, inc.next, now, inc.digest)
	if err != nil {
		return fmt.Errorf("sink %q: record the checkpoint: %w", p.cfg.Sink, err)
	}
	return nil
}

// pageDifferences appends to out the differences of rows, read by this
// pass, against what the sink acknowledged after the pass sent them
// (KeyDifferences' rule, without reading the ledger again).
func (p *Publisher) pageDifferences(ctx context.Context, rows []export.Row, from, to time.Time, out []KeyDifference) ([]KeyDifference, error) {
	held, err := ackedByPeriod(ctx, p.db, p.cfg.Sink, p.cfg.Granularity, pageKeys(rows), from, to)
	if err != nil {
		return out, fmt.Errorf("sink: differences: %w", err)
	}
	return appendDifferences(out, rows, held), nil
}

// pageKeys is the distinct keys of rows, which are in key order.
func pageKeys(rows []export.Row) []string {
	var keys []string
	for i := range rows {
		if i == 0 || rows[i].Key != rows[i-1].Key {
			keys = append(keys, rows[i].Key)
		}
	}
	return keys
}

// longestPeriod is more than the longest period of g on any calendar (a
// day of 25 hours, a month of 31 days and a daylight-saving hour).
func longestPeriod(g export.Granularity) time.Duration {
	switch g {
	case export.Hour:
		return time.Hour
	case export.Day:
		return 48 * time.Hour
	}
	return 32 * 24 * time.Hour
}

// carryWriter stores, for each key a pass reads, its carry at each of the
// pass's boundaries (billing_sink_carries, migration 021): the state
// before the key's first period that starts at or after the boundary,
// which is the state at that period's start (no period of the key starts
// between them). The boundaries are the pass's reach, where passes of
// the same month start, and now less the lookback, at or before where the
// passes of the next month start: without it the first passes of a month
// would start from the carry of the month before and read a month of
// rows. A pass stores them as it reads its pages, whether or not its
// sends succeed: a carry is a function of the ledger.
type carryWriter struct {
	p      *Publisher
	from   time.Time   // the pass's reach: older carries of its keys are dropped
	bounds []time.Time // ascending
	next   map[string]int
}

func (p *Publisher) carryWriter(from, to, now time.Time) *carryWriter {
	w := &carryWriter{p: p, from: from, bounds: []time.Time{from}, next: make(map[string]int)}
	ahead := now.Add(-max(p.cfg.Lookback, 0))
	if p.cfg.Calendar == export.CalendarUTC {
		ahead = p.cfg.Granularity.Start(ahead)
	}
	if ahead.After(from) && ahead.Before(to) {
		w.bounds = append(w.bounds, ahead)
	}
	return w
}

// write stores the carries that rows (a page, in key and period order)
// give.
func (w *carryWriter) write(ctx context.Context, rows []export.Row) error {
	var keys []string
	var valid, at []time.Time
	var net, low, billed []int64
	for i := range rows {
		r := &rows[i]
		n := w.next[r.Key]
		for ; n < len(w.bounds) && !r.PeriodStart.Before(w.bounds[n]); n++ {
			if !r.Before.Exact {
				continue // saturated: the key is read from its first report
			}
			keys = append(keys, r.Key)
			valid, at = append(valid, w.bounds[n]), append(at, r.PeriodStart)
			net, low, billed = append(net, r.Before.CumNet), append(low, r.Before.Low), append(billed, r.Before.CumBilled)
		}
		w.next[r.Key] = n
	}
	if len(keys) == 0 {
		return nil
	}
	// Carries from before the pass's reach are dropped: a later pass
	// reaches no further back unless its watermark does, and then reads
	// the key whole. An hourly pass reads every key with an hour that
	// ended: a carry that did not change is not written again.
	_, err := w.p.db.Exec(ctx, `WITH c AS (
    SELECT * FROM unnest($2::text[], $3::timestamptz[], $4::timestamptz[], $5::bigint[], $6::bigint[], $7::bigint[])
        AS u(key, valid_from, carried_at, cum_net, low, cum_billed)),
old AS (
    DELETE FROM billing_sink_carries o WHERE o.sink = $1 AND o.key IN (SELECT key FROM c) AND o.valid_from < $8)
INSERT INTO billing_sink_carries AS s (sink, key, valid_from, carried_at, granularity, calendar, cum_net, low, cum_billed)
SELECT $1, key, valid_from, carried_at, $9, $10, cum_net, low, cum_billed FROM c
ON CONFLICT (sink, key, valid_from) DO UPDATE SET carried_at = EXCLUDED.carried_at, granularity = EXCLUDED.granularity,
    calendar = EXCLUDED.calendar, cum_net = EXCLUDED.cum_net, low = EXCLUDED.low, cum_billed = EXCLUDED.cum_billed,
    written_at = now()
WHERE (s.carried_at, s.granularity, s.calendar, s.cum_net, s.low, s.cum_billed)
    IS DISTINCT FROM (EXCLUDED.carried_at, EXCLUDED.granularity, EXCLUDED.calendar, EXCLUDED.cum_net, EXCLUDED.low, EXCLUDED.cum_billed)`, w.p.cfg.Sink, keys, valid, at, net, low, billed, w.from,
		string(w.p.cfg.Granularity), string(w.p.cfg.Calendar))
	if err != nil {
		return fmt.Errorf("sink %q: store the carries: %w", w.p.cfg.Sink, err)
	}
	return nil
}
