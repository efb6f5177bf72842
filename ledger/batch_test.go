package ledger

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

func batchOf(n int) []Report {
	reps := make([]Report, n)
	for i := range reps {
		r := validReport()
		r.Key = fmt.Sprintf("tenant-%05d", i)
		r.Seq = int64(i + 1)
		r.Spent, r.Leased, r.Degraded = int64(i), int64(i)-3, 0
		r.SentAt = r.SentAt.Add(time.Duration(i) * time.Millisecond)
		reps[i] = r
	}
	return reps
}

func TestBatchRoundTrip(t *testing.T) {
	reps := batchOf(3)
	reps[0].Final = true
	reps[1].ProcessID = "p1~late1a.1" // a late row: published by p1
	reps[1].WouldReject = 7
	reps[2].WindowStart = time.Unix(0, 1_700_000_000_123_456_789).UTC()
	reps[2].WindowEnd = reps[2].WindowStart.Add(time.Minute)
	reps[2].Leased = -(1 << 53)
	body, id, err := EncodeBatch(reps)
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
	if !strings.HasPrefix(id, "p1|b|") {
		t.Fatalf("message ID %q does not name the publishing process", id)
	}
	body2, id2, _ := EncodeBatch(reps)
	if id2 != id || !bytes.Equal(body2, body) {
		t.Fatal("the same reports encode to another body or message ID")
	}
	reps[0].Spent++
	if _, id3, _ := EncodeBatch(reps); id3 == id {
		t.Fatal("different reports have the same message ID")
	}
}

func TestSingleReportStillDecodes(t *testing.T) {
	r := validReport()
	b, _ := r.Encode()
	got, err := DecodeMessage("", b)
	if err != nil || len(got) != 1 || got[0] != r {
		t.Fatalf("DecodeMessage(JSON) = %+v, %v", got, err)
	}
}

func TestEncodeBatchRefusesMixedReports(t *testing.T) {
	for _, mod := range []func(*Report){
		func(r *Report) { r.Region = "us" },
		func(r *Report) { r.ProcessID = "p2" },
	} {
		reps := batchOf(2)
		mod(&reps[1])
		if _, _, err := EncodeBatch(reps); !errors.Is(err, ErrBatchMixed) {
			t.Fatalf("EncodeBatch(mixed) = %v, want ErrBatchMixed", err)
		}
	}
	if _, _, err := EncodeBatch(nil); err == nil {
		t.Fatal("EncodeBatch(nil) succeeded")
	}
}

func TestSplitBatches(t *testing.T) {
	reps := batchOf(MaxBatchReports + 10)
	other := validReport()
	other.Region = "us"
	reps = append(reps, other)
	long := validReport()
	long.Key = strings.Repeat("k", store.MaxKeyLen)
	for range 2000 {
		reps = append(reps, long) // 2,000 long keys do not fit one batch's bytes
	}
	batches := SplitBatches(reps)
	total := 0
	for i, b := range batches {
		total += len(b)
		body, _, err := EncodeBatch(b)
		if err != nil {
			t.Fatalf("batch %d (%d reports): %v", i, len(b), err)
		}
		if len(body) >= 1<<20 {
			t.Fatalf("batch %d is %d bytes compressed, not under NATS' 1 MiB", i, len(body))
		}
	}
	if total != len(reps) {
		t.Fatalf("batches hold %d reports, want %d", total, len(reps))
	}
	if len(batches) < 4 {
		t.Fatalf("%d batches: want the count cap, the region and the byte cap to each cut one", len(batches))
	}
}

// A process's own reports, one group, are cut in order by the count and
// byte caps, as mixed ones are.
func TestSplitBatchesOneGroup(t *testing.T) {
	for _, tt := range []struct {
		name string
		key  string
		n    int
		want int // batches at least
	}{
		{"count cap", "k", 2*MaxBatchReports + 1, 3},
		{"byte cap", strings.Repeat("k", store.MaxKeyLen), 2000, 2},
		{"one batch", "k", 10, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reps := make([]Report, tt.n)
			for i := range reps {
				reps[i] = validReport()
				reps[i].Key = tt.key
				reps[i].Seq = int64(i + 1)
			}
			batches := SplitBatches(reps)
			var seq int64
			for i, b := range batches {
				if _, _, err := EncodeBatch(b); err != nil {
					t.Fatalf("batch %d (%d reports): %v", i, len(b), err)
				}
				for _, r := range b {
					if r.Seq != seq+1 {
						t.Fatalf("batch %d: report seq %d after %d: order lost", i, r.Seq, seq)
					}
					seq = r.Seq
				}
			}
			if seq != int64(tt.n) || len(batches) < tt.want {
				t.Fatalf("%d batches holding %d reports, want ≥ %d holding %d", len(batches), seq, tt.want, tt.n)
			}
		})
	}
}

func gz(raw []byte) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write(raw)
	w.Close()
	return b.Bytes()
}

func TestDecodeBatchRefuses(t *testing.T) {
	good, _, err := EncodeBatch(batchOf(2))
	if err != nil {
		t.Fatal(err)
	}
	var raw []byte
	if raw, err = gunzip(good); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		encoding string
		body     []byte
		want     string
	}{
		{"unknown encoding", "batch-v9", good, "unknown encoding"},
		{"not gzip", EncodingBatch, []byte("{}"), "batch"},
		{"empty", EncodingBatch, nil, "batch"},
		{"truncated gzip", EncodingBatch, good[:len(good)/2], "batch"},
		{"wrong magic", EncodingBatch, gz(append([]byte("QUB\x09"), raw[4:]...)), "not a version 1 batch"},
		{"truncated body", EncodingBatch, gz(raw[:len(raw)-3]), "truncated"},
		{"trailing bytes", EncodingBatch, gz(append(bytes.Clone(raw), 0)), "after the last report"},
		{"too large", EncodingBatch, gz(make([]byte, MaxBatchBytes+1)), "more than"},
		{"huge count", EncodingBatch, gz([]byte("QUB\x01\x02eu\x02p1\x00\xff\xff\x03")), "does not fit"},
		{"key too long", EncodingBatch, gz(append([]byte("QUB\x01\x02eu\x02p1\x00\x01\x81\x04"), make([]byte, 600)...)), "at most 512"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeReports(tt.encoding, tt.body)
			if !errors.Is(err, ErrInvalidReport) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodeReports = %v, want ErrInvalidReport mentioning %q", err, tt.want)
			}
		})
	}
}

func TestDecodeBatchKeepsGoodReportsApart(t *testing.T) {
	reps := batchOf(4)
	reps[1].Seq = 0       // invalid
	reps[3].Degraded = 99 // invalid: above spent
	body, _, err := EncodeBatch(reps)
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := DecodeReports(EncodingBatch, body)
	if err != nil {
		t.Fatal(err)
	}
	var good, bad []Decoded
	for i, d := range decoded {
		if d.Index != i || d.Report.Key != reps[i].Key {
			t.Fatalf("report %d decoded as %+v", i, d)
		}
		if d.Err == nil {
			good = append(good, d)
		} else {
			bad = append(bad, d)
		}
	}
	if len(good) != 2 || good[0].Index != 0 || good[1].Index != 2 {
		t.Fatalf("good = %+v", good)
	}
	if len(bad) != 2 || bad[0].Index != 1 || bad[1].Index != 3 ||
		!strings.Contains(bad[0].Err.Error(), "seq") || !strings.Contains(bad[1].Err.Error(), "degraded") {
		t.Fatalf("bad = %+v", bad)
	}
	if _, err := DecodeMessage(EncodingBatch, body); err == nil || !strings.Contains(err.Error(), "report 1") {
		t.Fatalf("DecodeMessage = %v, want the first bad report named", err)
	}
}

func FuzzDecodeBatch(f *testing.F) {
	good, _, _ := EncodeBatch(batchOf(3))
	f.Add(good)
	raw, _ := gunzip(good)
	f.Add(gz(raw[:len(raw)-1]))
	f.Fuzz(func(t *testing.T, body []byte) {
		decoded, err := DecodeReports(EncodingBatch, body)
		if err != nil {
			return
		}
		var good []Report
		for _, d := range decoded {
			if verr := d.Report.Validate(); d.Err == nil && verr != nil {
				t.Fatalf("a report decoded as valid fails Validate: %v", verr)
			}
			if d.Err == nil {
				good = append(good, d.Report)
			}
		}
		if len(good) == 0 {
			return
		}
		again, _, err := EncodeBatch(good)
		if err != nil {
			t.Fatalf("re-encoding decoded reports: %v", err)
		}
		back, err := DecodeMessage(EncodingBatch, again)
		if err != nil || !reflect.DeepEqual(back, good) {
			t.Fatalf("re-encoded batch decodes to %+v, %v", back, err)
		}
	})
}

// BenchmarkBatch measures encoding and decoding a full batch of reports of
// distinct keys (acct-%08x, the shape of customer keys) against one JSON
// report per message, per report: time, and bytes on the wire.
func BenchmarkBatch(b *testing.B) {
	reps := batchOf(5000)
	for i := range reps {
		reps[i].Key = fmt.Sprintf("acct-%08x", uint32(i)*2654435761)
		reps[i].Spent, reps[i].Leased = int64(i%500), int64(i%500+20)
	}
	body, _, err := EncodeBatch(reps)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode batch", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := EncodeBatch(reps); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(body))/float64(len(reps)), "wire-B/report")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reps)), "ns/report")
	})
	b.Run("decode batch", func(b *testing.B) {
		for b.Loop() {
			if _, err := DecodeMessage(EncodingBatch, body); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reps)), "ns/report")
	})
	one, _ := reps[0].Encode()
	b.Run("encode JSON", func(b *testing.B) {
		for b.Loop() {
			for i := range reps {
				if _, err := reps[i].Encode(); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(len(one)), "wire-B/report")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reps)), "ns/report")
	})
	b.Run("decode JSON", func(b *testing.B) {
		for b.Loop() {
			for range reps {
				if _, err := DecodeMessage("", one); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reps)), "ns/report")
	})
}
