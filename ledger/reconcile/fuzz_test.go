package reconcile_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
)

// fakeMsg is a delivered message for the batch path; it records how it was
// settled. Methods the batch path must not call panic (nil Msg).
type fakeMsg struct {
	jetstream.Msg
	subject     string
	data        []byte
	header      nats.Header
	seq         uint64
	acks, terms int
	published   time.Time
}

func (m *fakeMsg) Subject() string { return m.subject }
func (m *fakeMsg) Data() []byte    { return m.data }
func (m *fakeMsg) Headers() nats.Header {
	if m.header == nil {
		return nats.Header{}
	}
	return m.header
}
func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Stream: "FUZZ", Sequence: jetstream.SequencePair{Stream: m.seq, Consumer: m.seq},
		NumDelivered: 1, Timestamp: m.published}, nil
}
func (m *fakeMsg) Ack() error                    { m.acks++; return nil }
func (m *fakeMsg) InProgress() error             { return nil }
func (m *fakeMsg) Term() error                   { m.terms++; return nil }
func (m *fakeMsg) TermWithReason(r string) error { m.terms++; return nil }

// noJS stands for a JetStream the batch path never uses.
type noJS struct{ jetstream.JetStream }

// Near-duplicate window starts: the base is 567 ns past a microsecond, so
// some offsets stay in its microsecond and others cross into the next.
var (
	fuzzBase    = time.Date(2026, 3, 1, 10, 0, 0, 567, time.UTC)
	fuzzOffsets = [...]time.Duration{0, 1, 432, 433, 999, 1000, 1433, time.Minute}
	fuzzZones   = [...]*time.Location{time.UTC, time.FixedZone("UTC+2", 2*3600)}
)

// fuzzBatches turns data into batches of valid reports (7 bytes each):
// keys, processes, windows (near-duplicate starts included), zones,
// subjects of either layout, seqs and figures, and batch boundaries.
func fuzzBatches(prefix string, data []byte) [][]ledger.Report {
	batches := [][]ledger.Report{nil}
	for ; len(data) >= 7 && len(batches) <= 8; data = data[7:] {
		b := data[:7]
		spent := int64(b[3]) << (b[6] % 8 * 6) // up to 2^50
		r := ledger.Report{
			Key:         fmt.Sprintf("%sk%d", prefix, b[0]%3),
			ProcessID:   fmt.Sprintf("p%d", b[0]>>2%2),
			Region:      "eu",
			WindowStart: fuzzBase.Add(fuzzOffsets[b[1]%8]).In(fuzzZones[b[1]>>3%2]),
			Seq:         int64(b[2]%8) + 1,
			Spent:       spent,
			Rejected:    int64(b[4]),
			Degraded:    int64(b[5]) % (spent + 1),
			Leased:      spent - int64(int8(b[4]^b[5])),
			Final:       b[1]>>4%2 == 1,
			SentAt:      fuzzBase.Add(time.Duration(b[2]) * time.Millisecond),
		}
		if b[0]>>3%2 == 1 {
			r.ProcessID += "~late" + fmt.Sprint(b[2]%2)
		}
		r.WindowEnd = r.WindowStart.Add(time.Minute)
		batches[len(batches)-1] = append(batches[len(batches)-1], r)
		if b[1]>>5%2 == 1 {
			batches = append(batches, nil)
		}
	}
	return batches
}

type fuzzRowKey struct {
	key, process string
	start        int64 // µs
}

type fuzzRow struct {
	spent, rejected, degraded, seq int64
	final                          bool
	leased                         []int64 // the leased of the reports with the greatest seq
}

// expected is the ledger the batches must leave: per (key, window start in
// µs, process) the greatest cumulative figures, and leased from a report
// with the greatest seq.
func expected(batches [][]ledger.Report) map[fuzzRowKey]fuzzRow {
	want := map[fuzzRowKey]fuzzRow{}
	for _, b := range batches {
		for _, r := range b {
			k := fuzzRowKey{r.Key, r.ProcessID, r.WindowStart.UnixMicro()}
			w, ok := want[k]
			if !ok || r.Seq > w.seq {
				w.leased = nil
			}
			if !ok || r.Seq >= w.seq {
				w.leased = append(w.leased, r.Leased)
			}
			w.spent, w.rejected, w.degraded = max(w.spent, r.Spent), max(w.rejected, r.Rejected), max(w.degraded, r.Degraded)
			w.seq, w.final = max(w.seq, r.Seq), w.final || r.Final
			want[k] = w
		}
	}
	return want
}

func ledgerRows(t *testing.T, pool *pgxpool.Pool, prefix string) map[fuzzRowKey]fuzzRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT key, process_id, window_start, spent, rejected, degraded, seq, final, leased
		FROM usage_reports WHERE starts_with(key, $1)`, prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[fuzzRowKey]fuzzRow{}
	for rows.Next() {
		var k fuzzRowKey
		var r fuzzRow
		var ws time.Time
		var leased int64
		if err := rows.Scan(&k.key, &k.process, &ws, &r.spent, &r.rejected, &r.degraded, &r.seq, &r.final, &leased); err != nil {
			t.Fatal(err)
		}
		k.start = ws.UnixMicro()
		r.leased = []int64{leased}
		got[k] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// FuzzBatch drives the batch path with arbitrary valid reports, in one or
// more batches: nothing is refused or dead-lettered, every message is
// acked once, and the ledger holds the greatest cumulative figures per
// (key, window start in µs, process).
//
//	go test -run '^$' -fuzz FuzzBatch -fuzztime 20s ./ledger/reconcile/
func FuzzBatch(f *testing.F) {
	// One nanosecond apart (the poison pair of issue 12), then a valid report.
	f.Add([]byte{0, 0, 0, 5, 0, 0, 0, 0, 1, 1, 7, 0, 0, 0, 1, 0, 0, 3, 0, 0, 0})
	// Across a microsecond boundary, in two zones, over two batches.
	f.Add([]byte{4, 2, 3, 9, 1, 2, 1, 4, 3 | 8 | 32, 4, 9, 2, 2, 1, 4, 6, 5, 200, 3, 3, 2})
	// Late rows, finals and large figures.
	f.Add([]byte{8, 16, 1, 255, 255, 255, 7, 9, 23, 2, 255, 0, 1, 7, 8, 7, 3, 1, 1, 1, 0})
	f.Add([]byte{})

	pool := migratedPool(f, ledgertest.MigratedDatabase(f))
	cfg := reconcile.DefaultConfig()
	cfg.RetryMin, cfg.RetryMax = time.Millisecond, 10*time.Millisecond
	cfg.MaxReportAge = 0 // fuzzBase is a fixed day in the past
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg.Metrics = reconcile.NewMetrics(nil)
		r, err := reconcile.New(noJS{}, reconcile.NewWriter(pool), cfg)
		if err != nil {
			t.Fatal(err)
		}
		prefix := fmt.Sprintf("f%d-", n.Add(1))
		batches := fuzzBatches(prefix, data)
		var all []*fakeMsg
		for bi, b := range batches {
			msgs := make([]jetstream.Msg, 0, len(b))
			if bi%2 == 1 { // every other batch as batch messages (ledger.EncodingBatch)
				for _, group := range ledger.SplitBatches(b) {
					body, _, err := ledger.EncodeBatch(group)
					if err != nil {
						t.Fatal(err)
					}
					m := &fakeMsg{subject: ledger.DefaultStreamConfig().Subject(group[0].Region, group[0].ProcessID), data: body,
						header: nats.Header{ledger.HeaderEncoding: []string{ledger.EncodingBatch}}, seq: uint64(len(all) + 1), published: fuzzBase}
					all = append(all, m)
					msgs = append(msgs, m)
				}
				b = nil
			}
			for _, rep := range b {
				body, err := rep.Encode()
				if err != nil {
					t.Fatal(err)
				}
				subject := ledger.DefaultStreamConfig().Subject(rep.Region, rep.ProcessID)
				if rep.Seq%2 == 0 { // the layout of Reporters before identities: the incarnation in the subject
					process, _, _ := strings.Cut(rep.ProcessID, "~late")
					subject = ledger.DefaultSubjectPrefix + "." + rep.Region + "." + process
				}
				m := &fakeMsg{subject: subject, data: body, seq: uint64(len(all) + 1), published: fuzzBase}
				all = append(all, m)
				msgs = append(msgs, m)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := r.ProcessBatch(ctx, msgs)
			cancel()
			if err != nil {
				t.Fatalf("batch path: %v", err)
			}
		}
		for i, m := range all {
			if m.acks != 1 || m.terms != 0 {
				t.Fatalf("message %d (%s): %d acks, %d terms; want one ack", i, m.data, m.acks, m.terms)
			}
		}
		if e := val(cfg.Metrics.WriteErrors); e != 0 {
			t.Fatalf("%v failed writes", e)
		}
		want, got := expected(batches), ledgerRows(t, pool, prefix)
		if len(got) != len(want) {
			t.Fatalf("ledger has %d rows, want %d", len(got), len(want))
		}
		for k, w := range want {
			g, ok := got[k]
			if !ok {
				t.Fatalf("row %+v missing", k)
			}
			if g.spent != w.spent || g.rejected != w.rejected || g.degraded != w.degraded || g.seq != w.seq ||
				g.final != w.final || !slices.Contains(w.leased, g.leased[0]) {
				t.Fatalf("row %+v = %+v, want %+v", k, g, w)
			}
		}
	})
}
