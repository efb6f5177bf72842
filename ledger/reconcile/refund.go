package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/quotaplatform/quota/ledger"
)

// A limiter records a refund in the window, and on the process, that
// handle it (region's store checked it against that request's charge),
// so a refund's own row may have spent nothing: the request was allowed
// one window earlier, or by another process of the region. What bounds a
// refund is therefore its key's recent history in its region, not its
// row: a report may refund its row's spent + charged plus the net
// (spent + charged − refunded) of its key's other rows of the same region
// whose windows start within Config.RefundHorizon before its own, that
// sum floored at zero. A holder of one region's credentials (issue 37,
// item 2) can then refund only what that region recently took of the key.

// RefundHistory is a Store that can read a key's recent history, for
// boundRefunds. Writer implements it; with a Store that does not, a
// refund is bounded by its own row.
type RefundHistory interface {
	// RecentNet returns, for each report of refunds, the net of its key's
	// other rows of its region whose windows start in [its window_start −
	// horizon, its window_start], merging those rows with the batch's
	// reports of the same rows as the write will; at most MaxCounter, at
	// least 0.
	RecentNet(ctx context.Context, refunds, batch []ledger.Report, horizon time.Duration) ([]int64, error)
}

var _ RefundHistory = (*Writer)(nil)

// boundRefunds cuts the refund of each report of good that refunds more
// than its row spent and was charged to that plus its key's recent net in
// its region (RefundHistory), and returns a letter (ReasonRefundExceeds)
// for each cut report as sent. Only reports refunding more than their own
// row cost a query, one for the batch; the others cost nothing. It fails
// only when ctx ends.
func (r *Reconciler) boundRefunds(ctx context.Context, ka *keepAlive, good []pending) ([]DeadLetter, error) {
	var over []int // indexes in good
	keys := map[string]bool{}
	for i := range good {
		if rep := &good[i].rep; rep.Refunded > rep.Spent+rep.Charged { // each ≤ MaxCounter: no overflow
			over = append(over, i)
			keys[rep.Key] = true
		}
	}
	if len(over) == 0 {
		return nil, nil
	}
	history := make([]int64, len(over))
	if h, ok := r.store.(RefundHistory); ok && r.cfg.RefundHorizon > 0 {
		refunds := make([]ledger.Report, len(over))
		for j, i := range over {
			refunds[j] = good[i].rep
		}
		var batch []ledger.Report // the batch's rows of those keys, not yet written
		for i := range good {
			if keys[good[i].rep.Key] {
				batch = append(batch, good[i].rep)
			}
		}
		err := r.retry(ctx, ka, "reading refund history", len(over), func(ctx context.Context) error {
			qctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
			defer cancel()
			got, err := h.RecentNet(qctx, refunds, batch, r.cfg.RefundHorizon)
			if err == nil {
				history = got
			}
			return err
		}, nil)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			// Postgres refuses the query for good: bound by each row alone
			// rather than stop the stream.
			r.log.Error("reconcile: refund history unreadable; refunds bounded by their own rows", "err", err, "reports", len(over))
		}
	}
	notes := make([]DeadLetter, 0, len(over))
	for j, i := range over {
		p := &good[i]
		sent := p.rep
		most := sent.Spent + sent.Charged + history[j] // each ≤ MaxCounter: no overflow
		if sent.Refunded <= most {
			continue
		}
		p.rep.Refunded = most
		notes = append(notes, r.reportLetter(p.msg.m, badReport{index: p.index, rep: sent, reason: ReasonRefundExceeds,
			err: fmt.Errorf("reconcile: refunded %d exceeds spent %d + charged %d + the key's net in region %s over the refund horizon %d; written as %d",
				sent.Refunded, sent.Spent, sent.Charged, sent.Region, history[j], most)}))
	}
	return notes, nil
}

// recentNet sums, per refund (q.i), the net of the other rows of its key
// and region in its horizon: the ledger's and the batch's, a row in both
// merged as the upsert merges it (greatest of each figure). A row's net
// may be below zero (a refund of an earlier window's request); the sum is
// floored at zero, so one spend is never refunded twice.
const recentNet = `WITH q AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[], $5::text[])
    WITH ORDINALITY AS q(key, region, lo, ws, process, i)
), b AS (
  SELECT * FROM unnest($6::text[], $7::text[], $8::timestamptz[], $9::text[], $10::bigint[], $11::bigint[], $12::bigint[])
    AS b(key, region, ws, process, spent, charged, refunded)
), r AS (
  SELECT q.i, u.window_start AS ws, u.process_id AS process, u.spent, u.charged, u.refunded
  FROM q JOIN usage_reports u ON u.key = q.key AND u.region = q.region
   AND u.window_start >= q.lo AND u.window_start <= q.ws
  WHERE NOT (u.window_start = q.ws AND u.process_id = q.process)
  UNION ALL
  SELECT q.i, b.ws, b.process, b.spent, b.charged, b.refunded
  FROM q JOIN b ON b.key = q.key AND b.region = q.region AND b.ws >= q.lo AND b.ws <= q.ws
  WHERE NOT (b.ws = q.ws AND b.process = q.process)
), rows AS (
  SELECT i, max(spent)::numeric + max(charged) - max(refunded) AS net FROM r GROUP BY i, ws, process
)
SELECT i, GREATEST(LEAST(sum(net), $13), 0)::bigint FROM rows GROUP BY i`

// RecentNet implements RefundHistory in one query.
func (w *Writer) RecentNet(ctx context.Context, refunds, batch []ledger.Report, horizon time.Duration) ([]int64, error) {
	n := len(refunds)
	qKey, qRegion, qProcess := make([]string, n), make([]string, n), make([]string, n)
	qLo, qStart := make([]time.Time, n), make([]time.Time, n)
	for i, rep := range refunds {
		qKey[i], qRegion[i], qProcess[i] = rep.Key, rep.Region, rep.ProcessID
		qLo[i], qStart[i] = rep.WindowStart.Add(-horizon), rep.WindowStart
	}
	m := len(batch)
	bKey, bRegion, bProcess := make([]string, m), make([]string, m), make([]string, m)
	bStart := make([]time.Time, m)
	bSpent, bCharged, bRefunded := make([]int64, m), make([]int64, m), make([]int64, m)
	for i, rep := range batch {
		bKey[i], bRegion[i], bProcess[i], bStart[i] = rep.Key, rep.Region, rep.ProcessID, rep.WindowStart
		bSpent[i], bCharged[i], bRefunded[i] = rep.Spent, rep.Charged, rep.Refunded
	}
	rows, err := w.pool.Query(ctx, recentNet, qKey, qRegion, qLo, qStart, qProcess,
		bKey, bRegion, bStart, bProcess, bSpent, bCharged, bRefunded, int64(MaxCounter))
	if err != nil {
		return nil, fmt.Errorf("reconcile: read refund history: %w", err)
	}
	defer rows.Close()
	out := make([]int64, n)
	for rows.Next() {
		var i, net int64
		if err := rows.Scan(&i, &net); err != nil {
			return nil, fmt.Errorf("reconcile: read refund history: %w", err)
		}
		if i >= 1 && i <= int64(n) {
			out[i-1] = net
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reconcile: read refund history: %w", err)
	}
	return out, nil
}
