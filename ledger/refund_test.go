package ledger

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/quotaplatform/quota/limit"
)

// Refunded and charged cost travel in both encodings, and a message from
// before them (a batch without their flags, a JSON report without their
// fields) decodes with both zero.
func TestRefundedAndChargedTravel(t *testing.T) {
	reps := batchOf(3)
	reps[0].Refunded = 5
	reps[1].Charged = 1 << 40
	reps[2].Refunded, reps[2].Charged, reps[2].WouldReject = 2, 3, 4
	body, _, err := EncodeBatch(reps)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMessage(EncodingBatch, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := range reps {
		reps[i].SentAt = reps[i].SentAt.UTC()
	}
	if !reflect.DeepEqual(got, reps) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, reps)
	}
	for _, r := range reps {
		b, _ := r.Encode()
		if d, err := DecodeMessage("", b); err != nil || d[0] != r {
			t.Fatalf("JSON round trip of %+v: %+v %v", r, d, err)
		}
	}

	// batch-v1 as written before refunds: one report, flags final only.
	r := validReport()
	var raw bytes.Buffer
	var tmp [binary.MaxVarintLen64]byte
	uv := func(v uint64) { raw.Write(tmp[:binary.PutUvarint(tmp[:], v)]) }
	sv := func(v int64) { raw.Write(tmp[:binary.PutVarint(tmp[:], v)]) }
	str := func(s string) { uv(uint64(len(s))); raw.WriteString(s) }
	raw.Write(batchMagic[:])
	str(r.Region)
	str(r.ProcessID)
	sv(r.SentAt.UnixNano())
	uv(1)
	str(r.Key)
	sv(r.WindowStart.UnixNano())
	sv(int64(r.WindowEnd.Sub(r.WindowStart)))
	for _, v := range []int64{r.Spent, r.Leased, r.Rejected, r.Degraded, r.Seq, 0} {
		sv(v)
	}
	raw.WriteByte(flagFinal)
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write(raw.Bytes())
	zw.Close()
	old, err := DecodeMessage(EncodingBatch, zipped.Bytes())
	r.Final = true
	if err != nil || len(old) != 1 || old[0] != r {
		t.Fatalf("an old batch: %+v %v, want %+v", old, err, r)
	}
	if d, err := DecodeMessage("", []byte(`{"key":"k","window_start":"2026-01-02T03:04:00Z","window_end":"2026-01-02T03:05:00Z",`+
		`"process_id":"p1","region":"eu","spent":3,"leased":3,"rejected":0,"degraded":0,"final":false,"seq":1,"sent_at":"2026-01-02T03:04:00Z"}`)); err != nil ||
		d[0].Refunded != 0 || d[0].Charged != 0 || d[0].Spent != 3 {
		t.Fatalf("an old JSON report: %+v %v", d, err)
	}
	for _, bad := range []func(*Report){func(r *Report) { r.Refunded = -1 }, func(r *Report) { r.Charged = -1 }} {
		r := validReport()
		bad(&r)
		if err := r.Validate(); err == nil {
			t.Fatalf("%+v validates", r)
		}
	}
}

// The Reporter adds refunded and charged deltas to the window's report.
func TestReporterCountsRefundsAndCharges(t *testing.T) {
	e := &entry{key: "k"}
	e.add(&limit.Usage{Key: "k", Spent: 4, Leased: 4})
	e.add(&limit.Usage{Key: "k", Refunded: 3})
	e.add(&limit.Usage{Key: "k", Charged: 7})
	e.add(&limit.Usage{Key: "k", Refunded: 1, Charged: 1})
	c := DefaultConfig()
	b := e.report(&c, validReport().SentAt, false)
	if b.rep.Spent != 4 || b.rep.Refunded != 4 || b.rep.Charged != 8 {
		t.Fatalf("report %+v, want spent 4, refunded 4, charged 8", b.rep)
	}
}
