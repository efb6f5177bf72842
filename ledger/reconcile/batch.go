package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	msg jetstream.Msg
	rep ledger.Report
}

// process handles one gathered batch. It returns an error only when ctx
// ended; the messages not yet settled are then redelivered.
func (r *Reconciler) process(ctx context.Context, msgs []jetstream.Msg) error {
	ka := keepAlive{msgs: msgs, every: r.cfg.AckWait / 3, last: time.Now()}
	good := make([]pending, 0, len(msgs))
	var refused []jetstream.Msg
	var letters []DeadLetter
	for _, m := range msgs {
		if md, err := m.Metadata(); err == nil {
			if md.NumDelivered > 1 {
				r.m.Redeliveries.Inc()
			}
			r.m.Lag.Set(float64(md.NumPending))
		}
		rep, reason, err := check(r.cfg.Stream.SubjectPrefix, m.Subject(), m.Data())
		if err != nil {
			r.m.Rejected.WithLabelValues(string(reason)).Inc()
			refused = append(refused, m)
			letters = append(letters, r.letter(m, reason, err))
			continue
		}
		good = append(good, pending{m, rep})
	}
	if len(letters) > 0 {
		if err := r.deadLetter(ctx, &ka, refused, letters); err != nil {
			return err
		}
	}
	if len(good) == 0 {
		return nil
	}
	return r.commit(ctx, &ka, good)
}

// commit writes items and acknowledges their messages after the commit.
// When Postgres refuses the batch (a permanent error, see isTransient), it
// writes each half on its own, down to single reports: a single report
// refused is a dead letter.
func (r *Reconciler) commit(ctx context.Context, ka *keepAlive, items []pending) error {
	ka.touch()
	reps := make([]ledger.Report, len(items))
	for i := range items {
		reps[i] = items[i].rep
	}
	var res WriteResult
	var took time.Duration
	err := r.retry(ctx, ka, "writing batch", len(reps), func(ctx context.Context) error {
		t0 := time.Now()
		var err error
		res, err = r.store.Write(ctx, reps)
		took = time.Since(t0)
		return err
	})
	switch {
	case err == nil:
		r.committed(res, len(reps), took)
		for _, it := range items {
			_ = it.msg.Ack()
		}
		r.m.Reports.Add(float64(len(items)))
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case len(items) == 1:
		m := items[0].msg
		return r.deadLetter(ctx, ka, []jetstream.Msg{m}, []DeadLetter{r.letter(m, ReasonRefused, err)})
	}
	r.log.Warn("reconcile: Postgres refused the batch; splitting it to find the reports it refuses",
		"err", err, "reports", len(items))
	half := len(items) / 2
	if err := r.commit(ctx, ka, items[:half]); err != nil {
		return err
	}
	return r.commit(ctx, ka, items[half:])
}

func (r *Reconciler) committed(res WriteResult, reports int, took time.Duration) {
	r.m.BatchLatency.Observe(took.Seconds())
	r.m.BatchSize.Observe(float64(reports))
	r.m.Rows.WithLabelValues("inserted").Add(float64(res.Inserted))
	r.m.Rows.WithLabelValues("updated").Add(float64(res.Updated))
	r.m.Rows.WithLabelValues("unchanged").Add(float64(res.Unchanged))
	r.m.LastCommit.Set(float64(time.Now().UnixNano()) / 1e9)
}

// letter describes message m as a dead letter.
func (r *Reconciler) letter(m jetstream.Msg, reason Reason, err error) DeadLetter {
	l := DeadLetter{Stream: r.cfg.Stream.Name, Subject: m.Subject(), Data: m.Data(), Reason: reason, Detail: err.Error()}
	if md, err := m.Metadata(); err == nil {
		l.Stream, l.StreamSeq, l.PublishedAt = md.Stream, md.Sequence.Stream, md.Timestamp
	}
	return l
}

// deadLetter records letters (msgs[i] is letters[i]'s message), then
// terminates the messages. Should the Store refuse the letters themselves
// (it replaces what it cannot store, so this means a broken table), they
// are logged in full and terminated anyway: a message must not block the
// stream.
func (r *Reconciler) deadLetter(ctx context.Context, ka *keepAlive, msgs []jetstream.Msg, letters []DeadLetter) error {
	err := r.retry(ctx, ka, "recording dead letters", len(letters), func(ctx context.Context) error {
		return r.store.DeadLetter(ctx, letters)
	})
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	for i, m := range msgs {
		l := &letters[i]
		if err != nil {
			r.log.Error("reconcile: dead letter could not be recorded; terminating it", "record_err", err,
				"subject", l.Subject, "stream_seq", l.StreamSeq, "reason", l.Reason, "detail", l.Detail, "data", string(l.Data))
		} else {
			r.m.DeadLetters.WithLabelValues(string(l.Reason)).Inc()
			r.log.Warn("reconcile: report dead-lettered (usage_dead_letters) and terminated",
				"subject", l.Subject, "stream_seq", l.StreamSeq, "reason", l.Reason, "detail", l.Detail)
		}
		_ = m.TermWithReason("quota reconciler: dead letter: " + string(l.Reason))
	}
	return nil
}

// retry calls fn until it succeeds, fails permanently (isTransient false;
// that error is returned) or ctx ends (ctx.Err() is returned). A transient
// failure makes the Reconciler not ready, backs off exponentially between
// RetryMin and RetryMax, and keeps the batch's messages in progress.
func (r *Reconciler) retry(ctx context.Context, ka *keepAlive, what string, n int, fn func(context.Context) error) error {
	backoff := r.cfg.RetryMin
	started := time.Now()
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
		if !isTransient(err) {
			return err
		}
		r.health.wrote(fmt.Errorf("reconcile: %s: %w", what, err))
		r.log.Error("reconcile: "+what+" failed; retrying, nothing acked",
			"err", err, "reports", n, "backoff", backoff, "failing_for", time.Since(started).Round(time.Millisecond))
		ka.touch()
		if !sleepCtx(ctx, backoff) {
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
	last  time.Time
}

func (k *keepAlive) touch() {
	if time.Since(k.last) < k.every {
		return
	}
	for _, m := range k.msgs {
		_ = m.InProgress()
	}
	k.last = time.Now()
}
