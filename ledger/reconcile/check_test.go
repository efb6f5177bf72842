package reconcile

import (
	"errors"
	"testing"
	"time"

	"github.com/quotaplatform/quota/ledger"
)

var start = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func report(region, process string) ledger.Report {
	return ledger.Report{Key: "k", WindowStart: start, WindowEnd: start.Add(time.Minute), ProcessID: process,
		Region: region, Spent: 5, Leased: 6, Seq: 1, SentAt: start}
}

func TestCheckSubject(t *testing.T) {
	const prefix = "quota.usage"
	tests := []struct {
		name, subject, region, process string
		ok                             bool
	}{
		// A subject without a process would let a report claim any
		// process of its region (issue 37, item 6).
		{"region layout", "quota.usage.eu", "eu", "p1", false},
		{"region layout, other region", "quota.usage.us", "eu", "p1", false},
		{"region layout, region prefix of another", "quota.usage.eu", "eu-west", "p1", false},
		{"process layout", "quota.usage.eu.p1", "eu", "p1", true},
		{"incarnation under its identity", "quota.usage.eu.p1", "eu", "p1@kx2", true},
		{"late row of an incarnation under its identity", "quota.usage.eu.p1", "eu", "p1@kx2~latelx3k.1", true},
		{"incarnation of another process", "quota.usage.eu.p1", "eu", "p2@kx2", false},
		{"incarnation subject of before identities", "quota.usage.eu.p1@kx2", "eu", "p1@kx2", true},
		{"another incarnation's subject", "quota.usage.eu.p1@kx2", "eu", "p1@kx3", false},
		{"identity is not a prefix", "quota.usage.eu.p1", "eu", "p10@kx2", false},
		{"process layout, other process", "quota.usage.eu.p2", "eu", "p1", false},
		{"process layout, other region", "quota.usage.us.p1", "eu", "p1", false},
		{"process with dots", "quota.usage.eu.ip-10-0-0-1.ec2.internal@x1", "eu", "ip-10-0-0-1.ec2.internal@x1", true},
		{"process with dots, its identity", "quota.usage.eu.ip-10-0-0-1.ec2.internal", "eu", "ip-10-0-0-1.ec2.internal@x1", true},
		{"process with dots, other", "quota.usage.eu.ip-10-0-0-1.ec2", "eu", "ip-10-0-0-1.ec2.internal@x1", false},
		{"late row under its process", "quota.usage.eu.p1", "eu", "p1~latelx3k.1", true},
		{"late row of another process", "quota.usage.eu.p2", "eu", "p1~latelx3k.1", false},
		{"process prefix is not the process", "quota.usage.eu.p", "eu", "p1", false},
		// Region names are subject tokens: eu's limiters may publish on
		// quota.usage.eu.>, which must not let them claim a region
		// "eu.west" (nor eu.west's own limiters, were there such a region,
		// publish under eu.>).
		{"region with dots", "quota.usage.eu.west", "eu.west", "p1", false},
		{"region with dots, process layout", "quota.usage.eu.west.p1", "eu.west", "p1", false},
		{"region with dots, its first token", "quota.usage.eu.west.p1", "eu", "west.p1", true},
		{"empty region token", "quota.usage..p1", "eu", "p1", false},
		{"other prefix", "other.usage.eu", "eu", "p1", false},
		{"prefix alone", "quota.usage", "eu", "p1", false},
		{"prefix, empty rest", "quota.usage.", "eu", "p1", false},
		{"prefix without separator", "quota.usageeu", "eu", "p1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := report(tt.region, tt.process)
			err := checkSubject(prefix, tt.subject, &r)
			if (err == nil) != tt.ok {
				t.Fatalf("checkSubject(%q, region %q process %q) = %v, want ok=%v", tt.subject, tt.region, tt.process, err, tt.ok)
			}
			if err != nil && !errors.Is(err, errSubject) {
				t.Fatalf("error %v does not wrap errSubject", err)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	encode := func(mod func(*ledger.Report)) []byte {
		r := report("eu", "p1")
		mod(&r)
		b, err := r.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	keep := func(*ledger.Report) {}
	tests := []struct {
		name    string
		subject string
		data    []byte
		reason  Reason // "" = accepted
	}{
		{"valid", "quota.usage.eu.p1", encode(keep), ""},
		{"region subject, no process", "quota.usage.eu", encode(keep), ReasonSubject},
		{"not JSON", "quota.usage.eu.p1", []byte("{not json"), ReasonInvalid},
		{"empty body", "quota.usage.eu.p1", nil, ReasonInvalid},
		{"fails Validate", "quota.usage.eu.p1", encode(func(r *ledger.Report) { r.Seq = 0 }), ReasonInvalid},
		{"negative spent", "quota.usage.eu.p1", encode(func(r *ledger.Report) { r.Spent = -1 }), ReasonInvalid},
		{"window empty in microseconds", "quota.usage.eu.p1", encode(func(r *ledger.Report) {
			r.WindowStart = start.Add(100 * time.Nanosecond)
			r.WindowEnd = start.Add(900 * time.Nanosecond)
		}), ReasonInvalid},
		{"spent at the maximum", "quota.usage.eu.p1", encode(func(r *ledger.Report) { r.Spent = MaxCounter }), ""},
		{"spent above the maximum", "quota.usage.eu.p1", encode(func(r *ledger.Report) { r.Spent = MaxCounter + 1 }), ReasonOutOfRange},
		{"rejected above the maximum", "quota.usage.eu.p1", encode(func(r *ledger.Report) { r.Rejected = 1 << 62 }), ReasonOutOfRange},
		{"degraded above the maximum", "quota.usage.eu.p1", encode(func(r *ledger.Report) {
			r.Spent, r.Degraded = 1<<62, 1<<62
		}), ReasonOutOfRange},
		{"leased negative", "quota.usage.eu.p1", encode(func(r *ledger.Report) { r.Leased = -7 }), ""},
		{"leased below the minimum", "quota.usage.eu.p1", encode(func(r *ledger.Report) { r.Leased = -MaxCounter - 1 }), ReasonOutOfRange},
		{"leased above the maximum", "quota.usage.eu.p1", encode(func(r *ledger.Report) { r.Leased = MaxCounter + 1 }), ReasonOutOfRange},
		{"spent above leased", "quota.usage.eu.p1", encode(func(r *ledger.Report) { r.Spent, r.Leased = 100, 0 }), ""},
		{"region differs from subject", "quota.usage.us.p1", encode(keep), ReasonSubject},
		{"process differs from subject", "quota.usage.eu.p2", encode(keep), ReasonSubject},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, reason, err := check("quota.usage", tt.subject, "", tt.data, window{})
			if reason != tt.reason || (err == nil) != (tt.reason == "") {
				t.Fatalf("check = %q, %v; want reason %q", reason, err, tt.reason)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	east := time.FixedZone("UTC+2", 2*3600)
	tests := []struct {
		name string
		in   time.Time
		want time.Time
	}{
		{"whole microsecond", start, start},
		{"one nanosecond after", start.Add(time.Nanosecond), start},
		{"last nanosecond of the microsecond", start.Add(999 * time.Nanosecond), start},
		{"next microsecond", start.Add(1001 * time.Nanosecond), start.Add(time.Microsecond)},
		{"other zone", start.Add(3 * time.Nanosecond).In(east), start},
		{"before the Unix epoch", time.Date(1969, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
			time.Date(1969, 12, 31, 23, 59, 59, 999_999_000, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ledger.Report{WindowStart: tt.in, WindowEnd: tt.in, SentAt: tt.in}
			normalize(&r)
			for _, got := range []time.Time{r.WindowStart, r.WindowEnd, r.SentAt} {
				if !got.Equal(tt.want) || got.Location() != time.UTC {
					t.Fatalf("normalize(%v) = %v, want %v UTC", tt.in, got, tt.want)
				}
			}
		})
	}
}

// A batch is checked against its subject as a single report is: a batch of
// p1's reports published on p2's subject (or another region's) has every
// report refused for its subject, and on its own subject every report kept.
func TestCheckBatchSubject(t *testing.T) {
	reps := []ledger.Report{report("eu", "p1"), report("eu", "p1")}
	reps[1].Key = "k2"
	body, _, err := ledger.EncodeBatch(reps)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		subject string
		good    int
	}{
		{"quota.usage.eu.p1", 2},
		{"quota.usage.eu.p2", 0},
		{"quota.usage.us.p1", 0},
	} {
		good, bad, _, err := check("quota.usage", tt.subject, ledger.EncodingBatch, body, window{})
		if err != nil || len(good) != tt.good || len(good)+len(bad) != 2 {
			t.Fatalf("%s: %d kept, %d refused, %v; want %d kept", tt.subject, len(good), len(bad), err, tt.good)
		}
		for _, b := range bad {
			if b.reason != ReasonSubject || !errors.Is(b.err, errSubject) {
				t.Fatalf("%s: report %d refused for %q (%v), want subject", tt.subject, b.index, b.reason, b.err)
			}
		}
	}
}
