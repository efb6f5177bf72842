package reconcile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// message is one message to publish: a report (encoded, on its region's
// subject unless subject is set) or raw bytes.
type message struct {
	rep     *ledger.Report
	raw     []byte
	subject string
}

func (m message) encode(t testing.TB) (subject string, data []byte) {
	t.Helper()
	subject, data = m.subject, m.raw
	if m.rep != nil {
		var err error
		if data, err = m.rep.Encode(); err != nil {
			t.Fatal(err)
		}
		if subject == "" {
			subject = ledger.DefaultStreamConfig().Subject(m.rep.Region, m.rep.ProcessID)
		}
	}
	return subject, data
}

// publishMessages publishes msgs in order, each with a message ID of its
// own, and returns their stream sequences.
func publishMessages(t testing.TB, js jetstream.JetStream, msgs ...message) []uint64 {
	t.Helper()
	var seqs []uint64
	for i, m := range msgs {
		subject, data := m.encode(t)
		ack, err := js.PublishMsg(context.Background(), &nats.Msg{Subject: subject, Data: data},
			jetstream.WithMsgID(fmt.Sprintf("%s-%d-%d", t.Name(), i, time.Now().UnixNano())))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	return seqs
}

type deadLetterRow struct {
	seq     uint64
	subject string
	reason  string
	raw     string
}

func deadLetters(pool *pgxpool.Pool) ([]deadLetterRow, error) {
	rows, err := pool.Query(context.Background(),
		`SELECT stream_seq, subject, reason, raw FROM usage_dead_letters ORDER BY stream_seq`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []deadLetterRow
	for rows.Next() {
		var d deadLetterRow
		var raw []byte
		if err := rows.Scan(&d.seq, &d.subject, &d.reason, &raw); err != nil {
			return nil, err
		}
		d.raw = string(raw)
		out = append(out, d)
	}
	return out, rows.Err()
}

func at(r ledger.Report, d time.Duration) ledger.Report {
	r.WindowStart = r.WindowStart.Add(d)
	return r
}

func keyed(r ledger.Report, key string) ledger.Report {
	r.Key = key
	return r
}

// A message the ledger cannot take never stops ingestion: it is written
// merged (two window starts one nanosecond apart are one row), or
// recorded in usage_dead_letters and terminated, and the valid reports
// published with it and after it land.
func TestPoisonDoesNotBlockIngestion(t *testing.T) {
	// A constraint installed by the test stands for any row Postgres refuses.
	const refuseKey = `ALTER TABLE usage_reports ADD CONSTRAINT test_refused CHECK (key NOT LIKE 'refused%')`
	pairA := rep("pair", "p1", 1, 5, 6, false)
	pairB := at(rep("pair", "p1", 2, 7, 7, false), time.Nanosecond)
	valid := rep("valid", "p1", 1, 3, 3, true)
	p := func(r ledger.Report) *ledger.Report { return &r }
	tests := []struct {
		name  string
		setup string
		msgs  []message
		want  map[string]int64 // spent per key
		dead  map[int]reconcile.Reason
	}{
		{
			name: "one-nanosecond pair, then a valid report",
			msgs: []message{{rep: &pairA}, {rep: &pairB}, {rep: &valid}},
			want: map[string]int64{"pair": 7, "valid": 3},
		},
		{
			name:  "a row Postgres refuses, amid valid reports and the pair",
			setup: refuseKey,
			msgs: []message{{rep: p(keyed(valid, "a"))}, {rep: &pairA}, {rep: p(keyed(valid, "refused-1"))},
				{rep: &pairB}, {rep: p(keyed(valid, "b"))}, {rep: p(keyed(valid, "c"))}, {rep: &valid}},
			want: map[string]int64{"a": 3, "b": 3, "c": 3, "pair": 7, "valid": 3},
			dead: map[int]reconcile.Reason{2: reconcile.ReasonRefused},
		},
		{
			name:  "two refused rows in one batch",
			setup: refuseKey,
			msgs: []message{{rep: p(keyed(valid, "refused-1"))}, {rep: p(keyed(valid, "a"))},
				{rep: p(keyed(valid, "b"))}, {rep: p(keyed(valid, "refused-2"))}, {rep: &valid}},
			want: map[string]int64{"a": 3, "b": 3, "valid": 3},
			dead: map[int]reconcile.Reason{0: reconcile.ReasonRefused, 3: reconcile.ReasonRefused},
		},
		{
			name: "body that is not a report",
			msgs: []message{{raw: []byte(`{"key":`), subject: "quota.usage.eu"}, {rep: &valid}},
			want: map[string]int64{"valid": 3},
			dead: map[int]reconcile.Reason{0: reconcile.ReasonInvalid},
		},
		{
			name: "figures out of range",
			msgs: []message{{rep: p(func() ledger.Report { r := keyed(valid, "big"); r.Spent = 1 << 60; return r }())}, {rep: &valid}},
			want: map[string]int64{"valid": 3},
			dead: map[int]reconcile.Reason{0: reconcile.ReasonOutOfRange},
		},
		{
			name: "region differs from the subject",
			msgs: []message{{rep: p(keyed(valid, "spoof")), subject: "quota.usage.us"}, {rep: &valid}},
			want: map[string]int64{"valid": 3},
			dead: map[int]reconcile.Reason{0: reconcile.ReasonSubject},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := migratedPool(t, ledgertest.MigratedDatabase(t))
			if tt.setup != "" {
				if _, err := pool.Exec(context.Background(), tt.setup); err != nil {
					t.Fatal(err)
				}
			}
			js := connect(t, testserver.StartNATS(t).URL)
			// Published before the reconciler starts: one batch holds them all.
			seqs := publishMessages(t, js, tt.msgs...)
			x := startReconciler(t, js, reconcile.NewWriter(pool), nil)
			waitSpent(t, pool, tt.want, 10*time.Second)

			testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
				if n := val(x.m.Reports) + sumVec(x.m.DeadLetters); n != float64(len(tt.msgs)) {
					return fmt.Errorf("%v messages settled, want %d", n, len(tt.msgs))
				}
				return nil
			})
			rows, err := deadLetters(pool)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != len(tt.dead) {
				t.Fatalf("dead letters %+v, want %d", rows, len(tt.dead))
			}
			perReason := map[reconcile.Reason]float64{}
			for i, reason := range tt.dead {
				perReason[reason]++
				var row *deadLetterRow
				for j := range rows {
					if rows[j].seq == seqs[i] {
						row = &rows[j]
					}
				}
				subject, data := tt.msgs[i].encode(t)
				if row == nil || row.reason != string(reason) || row.subject != subject || row.raw != string(data) {
					t.Fatalf("message %d (seq %d): dead letter %+v, want reason %s, subject %s, raw %s", i, seqs[i], row, reason, subject, data)
				}
			}
			for _, reason := range []reconcile.Reason{reconcile.ReasonInvalid, reconcile.ReasonOutOfRange,
				reconcile.ReasonSubject, reconcile.ReasonRefused} {
				if got := val(x.m.DeadLetters.WithLabelValues(string(reason))); got != perReason[reason] {
					t.Errorf("dead_letters_total{reason=%q} = %v, want %v", reason, got, perReason[reason])
				}
				want := perReason[reason]
				if reason == reconcile.ReasonRefused {
					want = 0 // found by writing, not rejected
				} else if got := val(x.m.Rejected.WithLabelValues(string(reason))); got != want {
					t.Errorf("rejected_reports_total{reason=%q} = %v, want %v", reason, got, want)
				}
			}
			if err := x.r.Ready(); err != nil {
				t.Errorf("not ready after dead letters: %v", err)
			}
			// Nothing is left for redelivery: every message was acked or terminated.
			waitConsumerDrained(t, js)
			if got := spent(t, pool); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("ledger %v, want %v", got, tt.want)
			}
		})
	}
}

// The pair's row holds the greatest figures of both reports.
func TestOneNanosecondPairIsOneRow(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	w := reconcile.NewWriter(pool)
	ctx := context.Background()
	a := rep("k", "p", 1, 5, 9, false)
	a.Rejected = 4
	b := at(rep("k", "p", 2, 7, 7, false), time.Nanosecond)
	b.Rejected = 1
	res, err := w.Write(ctx, []ledger.Report{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 1 || res.Inserted != 1 {
		t.Fatalf("write: %+v, want one inserted row", res)
	}
	var spentN, leased, rejected, seq int64
	var ws time.Time
	if err := pool.QueryRow(ctx, `SELECT spent, leased, rejected, seq, window_start FROM usage_reports`).
		Scan(&spentN, &leased, &rejected, &seq, &ws); err != nil {
		t.Fatal(err)
	}
	if spentN != 7 || leased != 7 || rejected != 4 || seq != 2 || !ws.Equal(t0) {
		t.Fatalf("row spent=%d leased=%d rejected=%d seq=%d start=%v", spentN, leased, rejected, seq, ws)
	}
}

func TestWriterDeadLetterIsIdempotent(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	w := reconcile.NewWriter(pool)
	ctx := context.Background()
	letters := []reconcile.DeadLetter{
		{Stream: "S", StreamSeq: 7, PublishedAt: t0, Subject: "quota.usage.eu", Data: []byte("\x00\xff raw"),
			Reason: reconcile.ReasonInvalid, Detail: "bad \x00 text \xff"},
		{Stream: "S", Subject: "quota.usage.eu", Reason: reconcile.ReasonRefused, Detail: "unknown sequence"},
	}
	for range 2 {
		if err := w.DeadLetter(ctx, letters[:1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.DeadLetter(ctx, letters[1:]); err != nil {
		t.Fatal(err)
	}
	var n int
	var raw []byte
	if err := pool.QueryRow(ctx, `SELECT count(*), (SELECT raw FROM usage_dead_letters WHERE stream_seq = 7) FROM usage_dead_letters`).
		Scan(&n, &raw); err != nil {
		t.Fatal(err)
	}
	if n != 2 || string(raw) != "\x00\xff raw" {
		t.Fatalf("%d rows, raw %q; want 2 rows and the raw bytes kept", n, raw)
	}
}

// sumVec sums a reason-labelled counter over every reason.
func sumVec(v *prometheus.CounterVec) float64 {
	var n float64
	for _, r := range []reconcile.Reason{reconcile.ReasonInvalid, reconcile.ReasonOutOfRange,
		reconcile.ReasonSubject, reconcile.ReasonRefused} {
		n += val(v.WithLabelValues(string(r)))
	}
	return n
}

// A batch message (ledger.EncodingBatch) is settled report by report: its
// good reports are written, each bad one becomes a dead letter of its own
// (its place in the batch, the report alone as JSON), the message is
// acknowledged once, and a single-report message published after it lands.
func TestBatchPoisonSettlesEachReport(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	if _, err := pool.Exec(context.Background(),
		`ALTER TABLE usage_reports ADD CONSTRAINT test_refused CHECK (key NOT LIKE 'refused%')`); err != nil {
		t.Fatal(err)
	}
	js := connect(t, testserver.StartNATS(t).URL)
	valid := rep("valid", "p1", 1, 3, 3, true)
	shadow := keyed(valid, "shadow")
	shadow.WouldReject = 9
	invalid := keyed(valid, "invalid")
	invalid.Seq = 0
	big := keyed(valid, "big")
	big.Spent = 1 << 60
	batch := []ledger.Report{keyed(valid, "a"), invalid, keyed(valid, "refused-1"), shadow, big, keyed(valid, "b")}
	body, id, err := ledger.EncodeBatch(batch)
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: ledger.DefaultStreamConfig().Subject("eu", "p1"), Data: body, Header: nats.Header{}}
	msg.Header.Set(ledger.HeaderEncoding, ledger.EncodingBatch)
	ack, err := js.PublishMsg(context.Background(), msg, jetstream.WithMsgID(id))
	if err != nil {
		t.Fatal(err)
	}
	publish(t, js, "", valid)
	x := startReconciler(t, js, reconcile.NewWriter(pool), nil)
	waitSpent(t, pool, map[string]int64{"a": 3, "b": 3, "shadow": 3, "valid": 3}, 10*time.Second)
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := val(x.m.Reports) + sumVec(x.m.DeadLetters); n != float64(len(batch)+1) {
			return fmt.Errorf("%v reports settled, want %d", n, len(batch)+1)
		}
		return nil
	})
	var wouldReject int64
	if err := pool.QueryRow(context.Background(), `SELECT would_reject FROM usage_reports WHERE key = 'shadow'`).Scan(&wouldReject); err != nil || wouldReject != 9 {
		t.Fatalf("would_reject = %d, %v; want 9", wouldReject, err)
	}
	rows, err := pool.Query(context.Background(),
		`SELECT stream_seq, report_index, reason, raw FROM usage_dead_letters ORDER BY report_index`)
	if err != nil {
		t.Fatal(err)
	}
	type letter struct {
		seq    uint64
		index  int
		reason string
		key    string
	}
	var got []letter
	for rows.Next() {
		var l letter
		var raw []byte
		if err := rows.Scan(&l.seq, &l.index, &l.reason, &raw); err != nil {
			t.Fatal(err)
		}
		var r ledger.Report
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("letter %d raw is not one JSON report: %q", l.index, raw)
		}
		l.key = r.Key
		got = append(got, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []letter{{ack.Sequence, 1, "invalid", "invalid"}, {ack.Sequence, 2, "refused", "refused-1"}, {ack.Sequence, 4, "out_of_range", "big"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dead letters %+v, want %+v", got, want)
	}
	waitConsumerDrained(t, js)
	if m := val(x.m.Messages); m != 2 {
		t.Fatalf("messages_total = %v, want 2", m)
	}
}

// waitConsumerDrained waits until the reconciler's consumer has nothing
// pending or unacknowledged: every message was acked or terminated.
func waitConsumerDrained(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		cons, err := js.Consumer(context.Background(), ledger.DefaultStream, "reconciler")
		if err != nil {
			return err
		}
		ci, err := cons.Info(context.Background())
		if err != nil {
			return err
		}
		if ci.NumAckPending != 0 || ci.NumPending != 0 {
			return fmt.Errorf("consumer: %d ack pending, %d pending", ci.NumAckPending, ci.NumPending)
		}
		return nil
	})
}
