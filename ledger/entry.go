package ledger

import (
	"time"

	"github.com/quotaplatform/quota/limit"
)

// entryKey names one of a Reporter's entries: a key's accounting window.
type entryKey struct {
	key   string
	start int64 // window start, unix ns
}

// entry is a Reporter's cumulative counters for one key and window, and how
// far reports of them were accepted. The Reporter's mu guards it.
type entry struct {
	key       string
	start     time.Time
	processID string
	// Cumulative counters for the window.
	spent, leased, rejected, degraded, wouldReject int64
	refunded, charged                              int64
	version                                        int64 // bumped by every Record that changes the counters
	reported                                       int64 // highest version covered by an accepted report
	seq                                            int64 // Seq of the last report built
	final                                          bool  // a final report covering reported was accepted
	finalAt                                        time.Time
	// touched is the Reporter's Record count when a delta last reached the
	// entry: the least recently touched are freed first past MaxKeys.
	touched int64
	// early marks an entry chosen to be freed before its window ends
	// (Config.MaxKeys): its next report is final, and it is freed once a
	// final covering every change is accepted.
	early bool
}

// built is a report built from an entry, with the version it covers.
type built struct {
	rep     Report
	version int64
}

// add adds one usage delta to the counters.
func (e *entry) add(u *limit.Usage) {
	e.spent += u.Spent
	e.leased += u.Leased
	e.rejected += u.Rejected
	e.degraded += u.Degraded
	e.wouldReject += u.WouldReject
	e.refunded += u.Refunded
	e.charged += u.Charged
	e.version++
}

// settled reports whether an accepted final report covers every change.
func (e *entry) settled() bool { return e.final && e.version == e.reported }

// finalDue reports whether the entry's next report is final at now: its
// window ended FinalGrace ago, it was chosen to be freed early, or the
// Reporter is closing.
func (e *entry) finalDue(c *Config, now time.Time, closing bool) bool {
	return closing || e.early || !now.Before(e.start.Add(c.Window+c.FinalGrace))
}

// report builds the entry's next report (the next Seq) as of now.
func (e *entry) report(c *Config, now time.Time, final bool) built {
	e.seq++
	return built{version: e.version, rep: Report{
		Key: e.key, WindowStart: e.start, WindowEnd: e.start.Add(c.Window),
		ProcessID: e.processID, Region: c.Region,
		Spent: e.spent, Leased: e.leased, Rejected: e.rejected, Degraded: e.degraded,
		WouldReject: e.wouldReject, Refunded: e.refunded, Charged: e.charged,
		Final: final, Seq: e.seq, SentAt: now.UTC(),
	}}
}

// accept records that JetStream or the spool accepted b at now.
func (e *entry) accept(b *built, now time.Time) {
	e.reported = max(e.reported, b.version)
	if b.rep.Final && e.version == b.version {
		e.final = true
		e.finalAt = now
	}
}
