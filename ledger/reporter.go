package ledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/scratch"
	"github.com/quotaplatform/quota/limit"
)

// Reporter turns a Limiter's usage deltas into cumulative usage reports on
// JetStream. It implements limit.UsageSink.
//
// Record only updates in-memory counters under a mutex. Publishing happens
// on the Reporter's goroutine (Start … Close) or in Flush. Counters stay in
// memory until JetStream or the spool has accepted a report that covers
// them, so nothing is lost while NATS is away or the spool is full. Past
// Config.MaxKeys windows held, the Reporter flushes early and frees
// windows (see MaxKeys).
//
// Shutdown order: stop the Limiter first (its Run flushes its last usage
// into Record), then Close the Reporter, which sends final reports for
// every window.
type Reporter struct {
	cfg   Config
	js    jetstream.JetStream
	spool *Spool
	m     *Metrics
	log   *slog.Logger

	mu      sync.Mutex // guards entries, lateN, records, freedThrough
	entries map[entryKey]*entry
	lateN   int64
	records int64 // Record calls, for entry.touched
	// freedThrough is the latest window start (unix ns) of an entry freed
	// before Retention had passed (MaxKeys): a new entry of a window that
	// starts no later may have been freed, and gets a row of its own.
	freedThrough int64

	// early asks the loop for a flush past MaxKeys. One pending request is
	// enough: a flush handles every entry.
	early chan struct{}

	flushMu  sync.Mutex // serialises flushes (loop, Flush, Close)
	streamOK bool       // guarded by flushMu: the stream was found (or created) while connected
	missing  bool       // guarded by flushMu: the stream's absence was logged
	closed   bool       // guarded by flushMu: Close's final flush ran; RecordDurable refuses
	// Reports and messages JetStream accepted; guarded by flushMu.
	published, messagesSent int64
	// refusedFull counts the messages the stream refused as full during
	// the current flush; guarded by flushMu.
	refusedFull int
	// Buffers a flush reuses, guarded by flushMu: a flush handles every
	// changed window (10,000 keys make 10,000 reports a second), and
	// building them afresh was a quarter of a daemon's allocation per check
	// at 0.5 checks/s per key. Nothing holds them past the flush.
	dueBuf      scratch.Buffer[built]
	repsBuf     scratch.Buffer[Report]
	okBuf       scratch.Buffer[Report]
	acceptedBuf scratch.Map[spoolKey, int64]
	// idNonce and idSeq make message IDs (msgID); idSeq is guarded by
	// flushMu.
	idNonce string
	idSeq   uint64

	stop chan struct{}
	done chan struct{}
}

var _ limit.UsageSink = (*Reporter)(nil)

// NewReporter returns a Reporter publishing on js. It opens the spool file
// and sends nothing until Start or Flush. Until its flushes find the
// stream (CheckStream; with Config.CreateStream, EnsureStream creates it)
// they spool.
func NewReporter(js jetstream.JetStream, cfg Config) (*Reporter, error) {
	if js == nil {
		return nil, errors.New("ledger: NewReporter: nil JetStream")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Retention == 0 {
		cfg.Retention = cfg.Window
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System()
	}
	if cfg.AppendIncarnation {
		cfg.ProcessID += "@" + strconv.FormatInt(cfg.Clock.Now().UnixMilli(), 36)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noop.NewTracerProvider().Tracer("")
	}
	sp, err := OpenSpool(filepath.Join(cfg.SpoolDir, "usage-spool.jsonl"), cfg.SpoolMaxBytes)
	if err != nil {
		return nil, err
	}
	var nonce [16]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails (Go 1.24)
	r := &Reporter{cfg: cfg, js: js, spool: sp, m: cfg.Metrics, log: cfg.Logger,
		entries: make(map[entryKey]*entry), early: make(chan struct{}, 1), freedThrough: math.MinInt64,
		idNonce: hex.EncodeToString(nonce[:])}
	r.m.SpoolReports.Set(float64(sp.Len()))
	r.m.SpoolBytes.Set(float64(sp.Bytes()))
	return r, nil
}

// Record adds usage deltas to this process's cumulative counters. It never
// blocks on I/O. It is safe for concurrent use. Usage recorded after Close
// is never sent. When it leaves Config.MaxKeys windows or more held, it
// asks the loop for an early flush.
func (r *Reporter) Record(batch []limit.Usage) {
	if len(batch) == 0 {
		return
	}
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records++
	for i := range batch {
		u := &batch[i]
		if u.Spent == 0 && u.Leased == 0 && u.Rejected == 0 && u.Degraded == 0 && u.WouldReject == 0 &&
			u.Refunded == 0 && u.Charged == 0 {
			continue
		}
		k := entryKey{key: u.Key, start: u.WindowStart.UnixNano()}
		e := r.entries[k]
		if e == nil {
			e = r.newEntryLocked(k, u, now)
			r.entries[k] = e
		}
		e.add(u)
		e.touched = r.records
	}
	r.m.Entries.Set(float64(len(r.entries)))
	if len(r.entries) >= r.cfg.MaxKeys {
		select {
		case r.early <- struct{}{}:
		default: // one is pending already
		}
	}
}

// newEntryLocked makes the counters of a window the Reporter does not
// hold. A window's counters may have been forgotten already: once its
// final was accepted and Retention passed, or early, past MaxKeys. What
// comes for it now is reported under a row of its own, so that cumulative
// values never go backwards.
func (r *Reporter) newEntryLocked(k entryKey, u *limit.Usage, now time.Time) *entry {
	e := &entry{key: u.Key, start: u.WindowStart.UTC(), processID: r.cfg.ProcessID}
	if now.After(e.start.Add(r.cfg.Window+r.cfg.FinalGrace+r.cfg.Retention)) || k.start <= r.freedThrough {
		r.lateN++
		e.processID = r.cfg.ProcessID + lateMark + strconv.FormatInt(now.UnixNano(), 36) + "." + strconv.FormatInt(r.lateN, 36)
		r.m.LateDeltas.Inc()
	}
	return e
}

// Start starts the reporting loop. Close stops it.
func (r *Reporter) Start() {
	r.stop = make(chan struct{})
	r.done = make(chan struct{})
	go r.loop()
}

func (r *Reporter) loop() {
	defer close(r.done)
	t := r.cfg.Clock.NewTicker(r.cfg.ReportInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C():
			r.flushFromLoop()
		case <-r.early:
			r.flushFromLoop()
		case <-r.stop:
			return
		}
	}
}

func (r *Reporter) flushFromLoop() {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ReportInterval+r.cfg.PublishTimeout)
	_ = r.flush(ctx, false)
	cancel()
}

// Flush publishes the reports that are due now (changed counters, and finals
// of windows past their end plus FinalGrace) and drains the spool. It returns
// an error when some report could be neither published nor spooled; those
// stay in memory for the next flush. It returns an error wrapping
// ErrStreamFull when the stream refused reports for want of space, even
// though the spool took them: they reach no ledger until the stream has
// room.
func (r *Reporter) Flush(ctx context.Context) error { return r.flush(ctx, false) }

// Close stops the loop, sends a final report for every window it holds
// (to JetStream, or to the spool), and closes the spool. It returns an error
// when some usage could not be handed over (the spool was full and NATS
// away); that usage is lost with the process, and the error says how much.
func (r *Reporter) Close(ctx context.Context) error {
	if r.stop != nil {
		close(r.stop)
		<-r.done
		r.stop = nil
	}
	err := r.flush(ctx, true)
	r.flushMu.Lock()
	r.closed = true
	r.flushMu.Unlock()
	if cerr := r.spool.Close(); err == nil {
		err = cerr
	}
	return err
}

// flush is one round of reporting, serialised by flushMu: it hands over
// the spool's backlog, then every report that is due now (every window's
// final when closing), to JetStream or else to the spool, and marks what
// was accepted. It returns an error when some report could be neither
// published nor spooled; its usage stays in memory.
func (r *Reporter) flush(ctx context.Context, closing bool) error {
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	now := r.cfg.Clock.Now()
	ready := r.streamReady(ctx)
	spooled := r.spool.Len()
	due := r.buildDue(r.dueBuf.Get(), now, closing)
	defer func() { r.dueBuf.Put(due) }()
	if spooled == 0 && len(due) == 0 {
		r.m.Unacknowledge.Set(0)
		r.m.SpoolFullNow.Set(0)
		return nil
	}
	ctx, span := r.cfg.Tracer.Start(ctx, "quota.ledger.flush", trace.WithAttributes(
		attribute.Int("quota.reports_due", len(due)), attribute.Int("quota.spool_reports", spooled),
		attribute.Bool("quota.closing", closing)))
	defer span.End()
	published0, messages0 := r.publishedSoFar()
	r.refusedFull = 0
	if ready {
		r.drainSpool(ctx)
	}
	accepted, err := r.publishOrSpool(ctx, due, ready)
	unreported := r.markAccepted(due, accepted, now)
	if r.refusedFull > 0 {
		// The spool holds them, but nothing reaches the ledger until the
		// stream has room: the operator must hear it from Flush too.
		err = errors.Join(fmt.Errorf("%w: %d messages refused, %d reports waiting in the spool",
			ErrStreamFull, r.refusedFull, r.spool.Len()), err)
	}
	r.m.Unacknowledge.Set(float64(unreported))
	published, messages := r.publishedSoFar()
	span.SetAttributes(attribute.Int64("quota.reports_published", published-published0),
		attribute.Int64("quota.messages_published", messages-messages0), attribute.Int("quota.reports_unreported", unreported))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "usage kept in memory")
	}
	return err
}

// publishedSoFar returns the reports and messages JetStream accepted since
// NewReporter; read under flushMu.
func (r *Reporter) publishedSoFar() (reports, messages int64) {
	return r.published, r.messagesSent
}

// streamReady reports whether reports can be published: connected, and
// the stream found (or, with Config.CreateStream, created). Until it is,
// flushes spool, and each looks for the stream again (one request per
// flush). A publish refused for want of the stream looks again too.
func (r *Reporter) streamReady(ctx context.Context) bool {
	if !r.connected() {
		return false
	}
	if r.streamOK {
		return true
	}
	var err error
	if r.cfg.CreateStream {
		_, err = EnsureStream(ctx, r.js, r.cfg.Stream)
		if errors.Is(err, ErrStreamMismatch) {
			// This process's own server: its stream's limits are an
			// operator's edit, not a reason to stop reporting.
			r.log.Warn("ledger: the usage stream's limits differ from this process's; publishing anyway", "err", err)
			err = nil
		}
	} else {
		err = CheckStream(ctx, r.js, r.cfg.Stream)
	}
	if err != nil {
		if !r.missing {
			r.missing = true
			r.log.Warn("ledger: the usage stream is not there (the reconciler creates it); spooling usage until it is", "err", err)
		}
		return false
	}
	r.streamOK, r.missing = true, false
	return true
}

// drainSpool publishes the spooled reports, oldest windows first, and
// removes from the spool those JetStream acknowledged.
func (r *Reporter) drainSpool(ctx context.Context) {
	if r.spool.Len() == 0 {
		return
	}
	ok := r.publish(ctx, r.spool.Pending())
	if len(ok) > 0 {
		if err := r.spool.Remove(ok); err != nil {
			r.log.Error("ledger: spool remove", "err", err)
		}
	}
	r.updateSpoolGauges()
}

// buildDue builds the next report of every entry that changed since its
// last accepted report or whose final is due (its window ended FinalGrace
// ago, it is being freed early, or closing), after forgetting the entries
// settled more than Retention ago and, past MaxKeys, choosing entries to
// free early (freeEarlyLocked). It appends them to due.
func (r *Reporter) buildDue(due []built, now time.Time, closing bool) []built {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, e := range r.entries {
		if e.settled() && now.After(e.finalAt.Add(r.cfg.Retention)) {
			delete(r.entries, k)
		}
	}
	if len(r.entries) >= r.cfg.MaxKeys {
		r.freeEarlyLocked()
	}
	r.m.Entries.Set(float64(len(r.entries)))
	for _, e := range r.entries {
		final := e.finalDue(&r.cfg, now, closing)
		if e.settled() || (e.version == e.reported && !final) {
			continue
		}
		due = append(due, e.report(&r.cfg, now, final))
	}
	return due
}

// freeEarlyLocked brings the entries held down to MaxKeys/2: it frees the
// settled ones at once (their final reports were accepted; Retention is
// not waited for), then marks the least recently recorded others early:
// their reports are final from now on, and markAccepted frees them once
// one covering every change is accepted.
func (r *Reporter) freeEarlyLocked() {
	r.m.CapFlushes.Inc()
	var open []entryKey
	leaving := 0 // entries marked early by a flush before, not freed yet
	for k, e := range r.entries {
		switch {
		case e.settled():
			r.freeLocked(k)
		case e.early:
			leaving++
		default:
			open = append(open, k)
		}
	}
	excess := len(r.entries) - leaving - r.cfg.MaxKeys/2
	if excess <= 0 {
		return
	}
	sort.Slice(open, func(i, j int) bool { return r.entries[open[i]].touched < r.entries[open[j]].touched })
	for _, k := range open[:min(excess, len(open))] {
		r.entries[k].early = true
	}
}

// freeLocked forgets an entry before Retention has passed: a later delta
// of its window goes to a row of its own (newEntryLocked).
func (r *Reporter) freeLocked(k entryKey) {
	delete(r.entries, k)
	r.freedThrough = max(r.freedThrough, k.start)
	r.m.FreedEarly.Inc()
}

// publishOrSpool publishes the due reports (when ready: connected and the
// stream there, see streamReady) and writes
// what JetStream did not take to the spool. It returns the Seq of every
// report either accepted, by (process, key, window), and spoolReports'
// error. The map is the Reporter's, reused by the next flush.
func (r *Reporter) publishOrSpool(ctx context.Context, due []built, ready bool) (map[spoolKey]int64, error) {
	reps := r.repsBuf.Get()
	for i := range due {
		reps = append(reps, due[i].rep)
	}
	defer func() { r.repsBuf.Put(reps) }()
	var published []Report
	if len(reps) > 0 && ready {
		published = r.publish(ctx, reps)
	}
	accepted := r.acceptedBuf.Get()
	defer r.acceptedBuf.Put()
	for i := range published {
		accepted[keyOf(&published[i])] = published[i].Seq
	}
	var rest []Report
	for i := range reps {
		if seq, ok := accepted[keyOf(&reps[i])]; !ok || seq != reps[i].Seq {
			rest = append(rest, reps[i])
		}
	}
	spooled, err := r.spoolReports(rest)
	for i := range spooled {
		accepted[keyOf(&spooled[i])] = spooled[i].Seq
	}
	r.updateSpoolGauges()
	return accepted, err
}

// spoolReports writes reps to the spool and returns those it holds. What it
// cannot take stays in memory, counted and logged as spool-full, and the
// error says why: ErrSpoolFull with the count, or the write's error.
func (r *Reporter) spoolReports(reps []Report) ([]Report, error) {
	if len(reps) == 0 {
		r.m.SpoolFullNow.Set(0)
		return nil, nil
	}
	rejected, err := r.spool.Put(reps)
	if errors.Is(err, ErrSpoolFull) {
		err = nil // returned below, with the count
	} else if err != nil {
		r.log.Error("ledger: spool write failed; usage kept in memory", "err", err, "reports", len(reps))
		rejected = reps
	}
	r.m.Spooled.Add(float64(len(reps) - len(rejected)))
	if len(rejected) == 0 {
		r.m.SpoolFullNow.Set(0)
		return reps, nil
	}
	r.m.SpoolFull.Add(float64(len(rejected)))
	r.m.SpoolFullNow.Set(1)
	r.log.Error("ledger: usage spool full and NATS unreachable; usage kept in memory only",
		"reports", len(rejected), "spool_bytes", r.spool.Bytes(), "spool_max_bytes", r.cfg.SpoolMaxBytes)
	if err == nil {
		err = fmt.Errorf("%w: %d reports kept in memory", ErrSpoolFull, len(rejected))
	}
	out := make(map[spoolKey]bool, len(rejected))
	for i := range rejected {
		out[keyOf(&rejected[i])] = true
	}
	var spooled []Report
	for i := range reps {
		if !out[keyOf(&reps[i])] {
			spooled = append(spooled, reps[i])
		}
	}
	return spooled, err
}

// markAccepted records on their entries the due reports that were
// accepted (same Seq), and returns how many were not.
func (r *Reporter) markAccepted(due []built, accepted map[spoolKey]int64, now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	unreported := len(due)
	for i := range due {
		b := &due[i]
		if seq, ok := accepted[keyOf(&b.rep)]; !ok || seq != b.rep.Seq {
			continue
		}
		unreported--
		k := entryKey{key: b.rep.Key, start: b.rep.WindowStart.UnixNano()}
		if e := r.entries[k]; e != nil {
			e.accept(b, now)
			if e.early && e.settled() {
				r.freeLocked(k)
			}
		}
	}
	r.m.Entries.Set(float64(len(r.entries)))
	return unreported
}

func (r *Reporter) updateSpoolGauges() {
	r.m.SpoolReports.Set(float64(r.spool.Len()))
	r.m.SpoolBytes.Set(float64(r.spool.Bytes()))
}

// connected reports whether the NATS connection is up; while it is not,
// reports go straight to the spool instead of waiting for a timeout.
func (r *Reporter) connected() bool {
	nc := r.js.Conn()
	return nc != nil && nc.Status() == nats.CONNECTED
}

// outMsg is one usage message and the reports it carries.
type outMsg struct {
	msg  *nats.Msg
	id   string
	reps []Report
}

// messages encodes reports as usage messages: batches (EncodingBatch), or
// one JSON report per message (EncodingJSON). A report that cannot be
// encoded is logged and left out; it stays in memory.
func (r *Reporter) messages(reps []Report) []outMsg {
	var out []outMsg
	if r.cfg.Encoding == EncodingJSON {
		for i := range reps {
			data, err := reps[i].Encode()
			if err != nil {
				r.log.Error("ledger: encode report", "err", err)
				continue
			}
			subject := r.cfg.Stream.Subject(reps[i].Region, reps[i].ProcessID)
			out = append(out, outMsg{msg: &nats.Msg{Subject: subject, Data: data}, id: r.msgID(subject), reps: reps[i : i+1]})
		}
		return out
	}
	for _, b := range SplitBatches(reps) {
		data, _, err := EncodeBatch(b)
		if err != nil {
			r.log.Error("ledger: encode batch", "err", err, "reports", len(b))
			continue
		}
		msg := &nats.Msg{Subject: r.cfg.Stream.Subject(b[0].Region, b[0].ProcessID), Data: data, Header: nats.Header{}}
		msg.Header.Set(HeaderEncoding, EncodingBatch)
		msg.Header.Set(HeaderReports, strconv.Itoa(len(b)))
		out = append(out, outMsg{msg: msg, id: r.msgID(msg.Subject), reps: b})
	}
	return out
}

// msgID is the JetStream message ID (Nats-Msg-Id) of one message to
// publish on subject: "<subject>|<nonce>|<n>", n counting this Reporter's
// messages. JetStream's duplicate window spans the whole stream, so an ID
// another sender could guess lets it drop this process's report as a
// duplicate by publishing first under that ID on its own subject (issue
// 37, item 3). The nonce is random per Reporter and travels only in the
// stream, which no limiter may read, so the IDs cannot be guessed; each
// publication gets a new one, so a PubAck that says Duplicate was never
// caused by this Reporter and counts as a failure (publishWindow): the
// reports are sent again under new IDs. The subject in front is what the
// reconciler holds the ID to. Called under flushMu.
func (r *Reporter) msgID(subject string) string {
	r.idSeq++
	return subject + "|" + r.idNonce + "|" + strconv.FormatUint(r.idSeq, 36)
}

// publish sends reports, PublishBatch messages in flight at a time, and
// returns those that JetStream acknowledged. It stops at the first
// failure; what was not acknowledged is the caller's to spool. The slice
// returned is the Reporter's, reused by the next call (under flushMu).
func (r *Reporter) publish(ctx context.Context, reps []Report) []Report {
	msgs := r.messages(reps)
	ok := r.okBuf.Get() // what the last call returned was the caller's until now
	defer func() { r.okBuf.Put(ok) }()
	sent := 0
	for lo := 0; lo < len(msgs); lo += r.cfg.PublishBatch {
		window := msgs[lo:min(lo+r.cfg.PublishBatch, len(msgs))]
		acked, failed := r.publishWindow(ctx, window)
		for _, m := range acked {
			ok = append(ok, m.reps...)
		}
		sent += len(acked)
		if failed {
			r.log.Warn("ledger: publishing usage reports failed; spooling", "acked", len(ok))
			break
		}
	}
	r.m.Published.Add(float64(len(ok)))
	r.m.Messages.Add(float64(sent))
	r.published += int64(len(ok))
	r.messagesSent += int64(sent)
	return ok
}

// publishWindow publishes msgs asynchronously and waits for their acks (at
// most PublishTimeout). It returns those acknowledged and whether any
// failed.
func (r *Reporter) publishWindow(ctx context.Context, msgs []outMsg) (acked []outMsg, failed bool) {
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for i := range msgs {
		f, err := r.js.PublishMsgAsync(msgs[i].msg, jetstream.WithMsgID(msgs[i].id))
		if err != nil {
			r.m.PublishErr.Inc()
			failed = true
			break
		}
		futures = append(futures, f)
	}
	timer := time.NewTimer(r.cfg.PublishTimeout)
	defer timer.Stop()
	for j, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack != nil && ack.Duplicate {
				// Someone published under this unused ID first: the stream
				// did not store these reports.
				r.m.PublishErr.Inc()
				r.log.Error("ledger: the stream took a usage message for a duplicate of one this process never sent; sending its reports again under a new ID",
					"subject", msgs[j].msg.Subject, "reports", len(msgs[j].reps))
				failed = true
				continue
			}
			acked = append(acked, msgs[j])
		case err := <-f.Err():
			r.m.PublishErr.Inc()
			failed = true
			if isStreamFull(err) {
				r.noteStreamFull(err)
			}
			if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
				r.streamOK = false // deleted: look for it again (publish runs under flushMu)
			}
		case <-timer.C:
			r.m.PublishErr.Add(float64(len(futures) - j))
			return acked, true
		case <-ctx.Done():
			return acked, true
		}
	}
	return acked, failed
}

// noteStreamFull counts a message the stream refused for want of space and
// logs the first of the flush (under flushMu).
func (r *Reporter) noteStreamFull(err error) {
	r.m.StreamFull.Inc()
	if r.refusedFull == 0 {
		r.log.Error("ledger: the usage stream is full and refuses reports; they wait in the spool and reach no ledger until it has room",
			"stream", r.cfg.Stream.Name, "err", err, "spool_bytes", r.spool.Bytes())
	}
	r.refusedFull++
}

// ProcessID returns the process ID the Reporter writes into its reports
// (Config.ProcessID, with the incarnation suffix when configured).
func (r *Reporter) ProcessID() string { return r.cfg.ProcessID }
