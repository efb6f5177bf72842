package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/ledger"
)

// A batch goes through three steps (process): check every message
// (check), record and terminate the ones refused (deadLetter), and write
// the rest (commit), acknowledging them after the commit. A write that
// fails with a data or constraint error is split in halves until the
// reports Postgres refuses are alone; they become dead letters and the
// others are written. Nothing in a batch can stop the reports behind it.

// pending is a checked report and the message it came in.
type pending struct {
	msg   *inMsg
	index int // in the message's batch; -1 for a single-report message
	rep   ledger.Report
}

// inMsg is a message of the batch and how many of its reports are not
// settled yet (written or dead-lettered): it is acknowledged when none is
// left. A single-report message has one; a batch (ledger.EncodingBatch)
// many.
type inMsg struct {
	m       jetstream.Msg
	unacked int
	// handedBack: some of its reports wait for a later batch (a month
	// over the Writer's partition limit): the message was handed back to
	// the stream (Nak) and is never acknowledged by this batch.
	handedBack bool
}

// settle counts n of the message's reports as settled and acknowledges the
// message once all are.
func (im *inMsg) settle(n int) {
	im.unacked -= n
	if im.unacked == 0 && !im.handedBack {
		_ = im.m.Ack()
	}
}

// handBack returns the message to the stream for redelivery after delay;
// its reports already written are written again then, harmlessly.
func (im *inMsg) handBack(delay time.Duration) {
	if !im.handedBack {
		im.handedBack = true
		_ = im.m.NakWithDelay(delay)
	}
}

// process handles one gathered batch. It returns an error only when ctx
// ended; the messages not yet settled are then redelivered.
func (r *Reconciler) process(ctx context.Context, batch []gathered) error {
	ctx, span := r.cfg.Tracer.Start(ctx, "quota.reconcile.batch", trace.WithAttributes(attribute.Int("quota.messages", len(batch))))
	defer span.End()
	r.m.BatchStarted.Set(float64(r.cfg.Clock.Now().UnixNano()) / 1e9)
	defer r.m.BatchStarted.Set(0)
	msgs := make([]jetstream.Msg, len(batch))
	for i := range batch {
		msgs[i] = batch[i].m
	}
	ka := keepAlive{msgs: msgs, every: r.cfg.AckWait / 3, clock: r.cfg.Clock, last: r.cfg.Clock.Now()}
	good := make([]pending, 0, len(msgs))
	var refused []jetstream.Msg // messages refused whole: terminated
	var letters []DeadLetter    // theirs, then single reports'
	var partial []*inMsg        // the message of each single report's letter
	for _, g := range batch {
		m := g.m
		if md, err := m.Metadata(); err == nil {
			if md.NumDelivered > 1 {
				r.m.Redeliveries.Inc()
			}
			r.m.Lag.Set(float64(md.NumPending))
		}
		r.m.Messages.Inc()
		reps, bad, reason, err := g.good, g.bad, g.reason, g.err
		if err != nil {
			r.m.Rejected.WithLabelValues(string(reason)).Inc()
			refused = append(refused, m)
			letters = append(letters, r.letter(m, reason, err))
			continue
		}
		im := &inMsg{m: m, unacked: len(reps) + len(bad)}
		for _, b := range bad {
			r.m.Rejected.WithLabelValues(string(b.reason)).Inc()
			letters = append(letters, r.reportLetter(m, b))
			partial = append(partial, im)
		}
		for _, c := range reps {
			good = append(good, pending{im, c.index, c.rep})
		}
		if im.unacked == 0 { // an empty batch
			_ = m.Ack()
		}
	}
	span.SetAttributes(attribute.Int("quota.reports", len(good)+len(partial)), attribute.Int("quota.dead_letters", len(letters)))
	// Letters of reports written all the same, their refunds cut.
	notes, err := r.boundRefunds(ctx, &ka, good)
	if err != nil {
		return err
	}
	if len(letters) > 0 {
		if err := r.deadLetter(ctx, &ka, refused, partial, letters); err != nil {
			return err
		}
	}
	if len(notes) > 0 {
		if err := r.deadLetter(ctx, &ka, nil, nil, notes); err != nil {
			return err
		}
	}
	for len(good) > 0 {
		n := min(len(good), r.cfg.BatchSize)
		if err := r.commit(ctx, &ka, good[:n]); err != nil {
			return err
		}
		good = good[n:]
	}
	return nil
}

// commit writes items and acknowledges their messages after the commit
// (a batch message once every report of it is settled). When Postgres
// refuses the batch (a permanent error, see isTransient), it writes each
// half on its own, down to single reports: a single report refused is a
// dead letter.
func (r *Reconciler) commit(ctx context.Context, ka *keepAlive, items []pending) error {
	ka.touch()
	reps := make([]ledger.Report, len(items))
	for i := range items {
		reps[i] = items[i].rep
	}
	var res WriteResult
	var took time.Duration
	ctx, span := r.cfg.Tracer.Start(ctx, "quota.reconcile.write", trace.WithAttributes(attribute.Int("quota.reports", len(reps))))
	attempts := 0
	var months *MonthsError
	err := r.retry(ctx, ka, "writing batch", len(reps), func(ctx context.Context) error {
		t0 := r.cfg.Clock.Now()
		var err error
		attempts++
		wctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout) // on the wall clock: it bounds I/O
		res, err = r.store.Write(wctx, reps)
		cancel()
		took = r.cfg.Clock.Now().Sub(t0)
		if errors.As(err, &months) {
			return nil // the rest is written; settled below
		}
		months = nil
		return err
	}, func(err error) bool {
		// Postgres answers but will not take these reports now (a lock it
		// waits for, a resource it lacks): retrying them whole would
		// hold up every report behind them. Split; a lone report that
		// keeps failing is parked.
		return answered(err) && (len(items) > 1 || attempts >= parkAttempts)
	})
	span.SetAttributes(attribute.Int("quota.attempts", attempts), attribute.Int("quota.rows_inserted", res.Inserted),
		attribute.Int("quota.rows_updated", res.Updated))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "batch not written")
	}
	span.End()
	switch {
	case err == nil && months != nil:
		r.committed(res, len(reps), took)
		return r.settleMonths(ctx, ka, items, months)
	case err == nil:
		r.committed(res, len(reps), took)
		for _, it := range items {
			it.msg.settle(1)
		}
		r.m.Reports.Add(float64(len(items)))
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case isTransient(err) && len(items) == 1:
		it := items[0]
		it.msg.handBack(r.cfg.ParkDelay)
		r.m.Parked.Inc()
		r.log.Error("reconcile: a report Postgres will not take now is parked on the stream; it comes back alone",
			"err", err, "subject", it.msg.m.Subject(), "index", it.index, "month", monthOf(it.rep.WindowStart).Format("2006-01"),
			"attempts", attempts, "retry_after", r.cfg.ParkDelay)
		return nil
	case isTransient(err):
		r.log.Warn("reconcile: part of the batch cannot be written now; splitting it so that the rest is",
			"err", err, "reports", len(items))
	case len(items) == 1:
		it := items[0]
		l := r.reportLetter(it.msg.m, badReport{index: it.index, rep: it.rep, reason: ReasonRefused, err: err})
		return r.deadLetter(ctx, ka, nil, []*inMsg{it.msg}, []DeadLetter{l})
	}
	if !isTransient(err) {
		r.log.Warn("reconcile: Postgres refused the batch; splitting it to find the reports it refuses",
			"err", err, "reports", len(items))
	}
	half := len(items) / 2
	if err := r.commit(ctx, ka, items[:half]); err != nil {
		return err
	}
	return r.commit(ctx, ka, items[half:])
}

// settleMonths settles a batch that Write wrote except for the months of
// merr: reports of a detached month become dead letters (ReasonDetached),
// the messages of reports of a month over the partition limit are handed
// back to the stream for a later batch (whose Write creates the next
// partitions), and every other report is settled as written.
func (r *Reconciler) settleMonths(ctx context.Context, ka *keepAlive, items []pending, merr *MonthsError) error {
	var letters []DeadLetter
	var partial []*inMsg
	written := 0
	for _, it := range items {
		switch merr.Reason(monthOf(it.rep.WindowStart)) {
		case ReasonDetached:
			l := r.reportLetter(it.msg.m, badReport{index: it.index, rep: it.rep, reason: ReasonDetached,
				err: fmt.Errorf("reconcile: window_start %v is in a month detached by retention (usage_detached_months)", it.rep.WindowStart)})
			letters = append(letters, l)
			partial = append(partial, it.msg)
		case reasonWaiting:
			it.msg.handBack(r.cfg.BatchInterval)
		default:
			it.msg.settle(1)
			written++
		}
	}
	r.m.Reports.Add(float64(written))
	if len(merr.Waiting) > 0 {
		r.log.Warn("reconcile: a batch needs more new partitions than one write creates; handing its messages back",
			"err", merr.Error())
	}
	if len(letters) == 0 {
		return nil
	}
	return r.deadLetter(ctx, ka, nil, partial, letters)
}

func (r *Reconciler) committed(res WriteResult, reports int, took time.Duration) {
	r.m.BatchLatency.Observe(took.Seconds())
	r.m.BatchSize.Observe(float64(reports))
	r.m.Rows.WithLabelValues("inserted").Add(float64(res.Inserted))
	r.m.Rows.WithLabelValues("updated").Add(float64(res.Updated))
	r.m.Rows.WithLabelValues("unchanged").Add(float64(res.Unchanged))
	r.m.LastCommit.Set(float64(r.cfg.Clock.Now().UnixNano()) / 1e9)
}

// letter describes message m as a dead letter.
func (r *Reconciler) letter(m jetstream.Msg, reason Reason, err error) DeadLetter {
	l := DeadLetter{Stream: r.cfg.Stream.Name, Subject: m.Subject(), Index: -1, Data: m.Data(), Reason: reason, Detail: err.Error()}
	if md, err := m.Metadata(); err == nil {
		l.Stream, l.StreamSeq, l.PublishedAt = md.Stream, md.Sequence.Stream, md.Timestamp
	}
	return l
}

// reportLetter describes one report of message m as a dead letter. The
// letter's Data is the report alone, as JSON, so that it reads like a
// single-report message; Index is its place in the batch (-1 when the
// message is a single report).
func (r *Reconciler) reportLetter(m jetstream.Msg, b badReport) DeadLetter {
	l := r.letter(m, b.reason, b.err)
	if m.Headers().Get(ledger.HeaderEncoding) == "" {
		return l // the body is the report
	}
	l.Index = b.index
	if data, err := b.rep.Encode(); err == nil {
		l.Data = data
	}
	l.Detail = fmt.Sprintf("report %d of a batch: %s", b.index, l.Detail)
	return l
}

// deadLetter records letters, then terminates the messages refused whole
// (refused, the first letters) and settles the message of each single
// report's letter (partial, the letters after them); letters beyond those
// are notes of reports that are written all the same, and settle nothing. Should the Store
// refuse the letters themselves (it replaces what it cannot store, so this
// means a broken table), they are logged in full and settled anyway: a
// message must not block the stream.
func (r *Reconciler) deadLetter(ctx context.Context, ka *keepAlive, refused []jetstream.Msg, partial []*inMsg, letters []DeadLetter) error {
	err := r.retry(ctx, ka, "recording dead letters", len(letters), func(ctx context.Context) error {
		return r.store.DeadLetter(ctx, letters)
	}, nil)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	for i := range letters {
		l := &letters[i]
		if err != nil {
			r.log.Error("reconcile: dead letter could not be recorded; settling it anyway", "record_err", err,
				"subject", l.Subject, "stream_seq", l.StreamSeq, "index", l.Index, "reason", l.Reason, "detail", l.Detail, "data", string(l.Data))
		} else {
			r.m.DeadLetters.WithLabelValues(string(l.Reason)).Inc()
			r.log.Warn("reconcile: report dead-lettered (usage_dead_letters)",
				"subject", l.Subject, "stream_seq", l.StreamSeq, "index", l.Index, "reason", l.Reason, "detail", l.Detail)
		}
		switch {
		case i < len(refused):
			_ = refused[i].TermWithReason("quota reconciler: dead letter: " + string(l.Reason))
		case i-len(refused) < len(partial):
			partial[i-len(refused)].settle(1)
		} // else a note: the report is written all the same
	}
	return nil
}

// retry calls fn until it succeeds, fails permanently (isTransient false;
// that error is returned) or ctx ends (ctx.Err() is returned). A transient
// failure makes the Reconciler not ready, backs off exponentially between
// RetryMin and RetryMax, and keeps the batch's messages in progress.
//
// giveUp, when not nil, may end the retries of a transient failure early:
// when it returns true for err, err is returned.
func (r *Reconciler) retry(ctx context.Context, ka *keepAlive, what string, n int, fn func(context.Context) error, giveUp func(error) bool) error {
	backoff := r.cfg.RetryMin
	started := r.cfg.Clock.Now()
	for {
		err := fn(ctx)
		if err == nil {
			r.health.wrote(nil)
			return nil
		}
		r.m.WriteErrors.Inc()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !isTransient(err) || (giveUp != nil && giveUp(err)) {
			return err
		}
		r.health.wrote(fmt.Errorf("reconcile: %s: %w", what, err))
		r.log.Error("reconcile: "+what+" failed; retrying, nothing acked",
			"err", err, "reports", n, "backoff", backoff, "failing_for", r.cfg.Clock.Now().Sub(started).Round(time.Millisecond))
		ka.touch()
		if !r.sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, r.cfg.RetryMax)
		ka.touch()
	}
}

// keepAlive keeps a batch's messages ours while it is retried or split, so
// that JetStream does not hand them to another reconciler meanwhile: every
// third of AckWait it marks them in progress (the client ignores settled
// ones).
type keepAlive struct {
	msgs  []jetstream.Msg
	every time.Duration
	clock clock.Clock
	last  time.Time
}

func (k *keepAlive) touch() {
	now := k.clock.Now()
	if now.Sub(k.last) < k.every {
		return
	}
	for _, m := range k.msgs {
		_ = m.InProgress()
	}
	k.last = now
}
