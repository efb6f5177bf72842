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
UNION SELECT key FROM usage_reports WHERE $3 AND window_start >= $4 AND window_start < $5
UNION SELECT key FROM billing_sink_revisits WHERE sink = $6
UNION SELECT key FROM billing_sink_events WHERE sink = $6 AND status <> 'sent'`

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
		return inc, nil // read everything
	}
	longest := longestPeriod(p.cfg.Granularity)
	ended := p.cfg.Granularity.Start(now).After(*checked)
	if p.cfg.Calendar == export.CalendarPlan {
		// A plan's period ends at a local midnight or clock hour: a UTC
		// quarter-hour in every zone in use.
		ended = now.Truncate(15 * time.Minute).After(*checked)
	}
	rows, err := p.db.Query(ctx, candidatesSQL, *prev, from.Add(-longest), ended, checked.Add(-longest), now, p.cfg.Sink)
	if err != nil {
		return nil, fmt.Errorf("sink %q: keys changed since the checkpoint: %w", p.cfg.Sink, err)
	}
	defer rows.Close()
	inc.keys = []string{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("sink %q: keys changed since the checkpoint: %w", p.cfg.Sink, err)
		}
		inc.keys = append(inc.keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sink %q: keys changed since the checkpoint: %w", p.cfg.Sink, err)
	}
	return inc, nil
}

// checkpoint records a successful pass: its checkpoint, its now, and the
// keys it must read again (revisit), replacing the revisits of the keys it
// read (read nil: every key).
func (p *Publisher) checkpoint(ctx context.Context, inc *increment, now time.Time, read, revisit []string) error {
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
