package ledger

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

func validReport() Report {
	start := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	return Report{Key: "k", WindowStart: start, WindowEnd: start.Add(time.Minute), ProcessID: "p1",
		Region: "eu", Spent: 10, Leased: 12, Rejected: 1, Degraded: 2, Seq: 1, SentAt: start}
}

func TestReportValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Report)
		field  string // "" = valid
	}{
		{"valid", func(*Report) {}, ""},
		{"negative leased is fine", func(r *Report) { r.Leased = -3 }, ""},
		{"empty key", func(r *Report) { r.Key = "" }, "key"},
		{"long key", func(r *Report) { r.Key = strings.Repeat("k", store.MaxKeyLen+1) }, "key"},
		{"bad utf8 key", func(r *Report) { r.Key = "\xff" }, "key"},
		{"no process", func(r *Report) { r.ProcessID = "" }, "process_id"},
		{"no region", func(r *Report) { r.Region = "" }, "region"},
		{"no window", func(r *Report) { r.WindowStart = time.Time{} }, "window_start"},
		{"end before start", func(r *Report) { r.WindowEnd = r.WindowStart }, "window_end"},
		{"negative spent", func(r *Report) { r.Spent = -1 }, "spent"},
		{"negative rejected", func(r *Report) { r.Rejected = -1 }, "rejected"},
		{"degraded above spent", func(r *Report) { r.Degraded = 11 }, "degraded"},
		{"zero seq", func(r *Report) { r.Seq = 0 }, "seq"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validReport()
			tt.mutate(&r)
			err := r.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidReport) || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("Validate = %v, want ErrInvalidReport naming %q", err, tt.field)
			}
		})
	}
}

func TestReportRoundTrip(t *testing.T) {
	r := validReport()
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeReport(b)
	if err != nil {
		t.Fatal(err)
	}
	if got != r {
		t.Fatalf("round trip: got %+v, want %+v", got, r)
	}
	if id := r.MsgID(); id != "eu|p1|k|"+"1767323040000000000|1" {
		t.Fatalf("MsgID = %q", id)
	}
}

func FuzzDecodeReport(f *testing.F) {
	r := validReport()
	b, _ := r.Encode()
	f.Add(b)
	f.Add([]byte(`{"key":"","seq":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := DecodeReport(data)
		if err != nil {
			return
		}
		if rep.Validate() != nil {
			t.Fatalf("decoded report does not validate: %+v", rep)
		}
		b, err := rep.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeReport(b); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
	})
}
