package reconcile

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quotaplatform/quota/ledger"
)

// Reason says why a message became a dead letter. It is the reason label of
// quota_reconciler_rejected_reports_total and
// quota_reconciler_dead_letters_total, and the reason column of
// usage_dead_letters.
type Reason string

// The reasons. All but ReasonRefused and ReasonDetached are checked before
// writing (rejected reports); those two are found by writing.
const (
	// ReasonInvalid: the body is not a valid report (ledger.DecodeReport
	// fails), or its window is empty once its times are cut to microseconds.
	ReasonInvalid Reason = "invalid"
	// ReasonOutOfRange: a figure beyond MaxCounter.
	ReasonOutOfRange Reason = "out_of_range"
	// ReasonSubject: the report's region or process differs from the subject
	// it was published on (checkSubject).
	ReasonSubject Reason = "subject"
	// ReasonRefused: Postgres refused the report's row with a data or
	// constraint error (see isTransient), found by splitting the batch.
	ReasonRefused Reason = "refused"
	// ReasonTooOld: the report's window starts before now − Config.MaxReportAge.
	ReasonTooOld Reason = "too_old"
	// ReasonFuture: the report's window starts after now + Config.MaxReportSkew.
	ReasonFuture Reason = "future"
	// ReasonDetached: the report's month was detached by retention
	// (usage_detached_months); writing it would start a new, lone partition
	// for the month. Found by writing (MonthsError).
	ReasonDetached Reason = "detached"
	// ReasonRefundExceeds: the report refunds more than its row spent and
	// was charged plus what its key's other rows of its region net over
	// the refund horizon (Config.RefundHorizon, see boundRefunds). Its
	// refund is cut to that and the report written; the letter keeps the
	// report as sent. A refund that large could only lower the key's quota
	// base and bill below zero (issue 37, item 2).
	ReasonRefundExceeds Reason = "refund_exceeds_spent"
	// ReasonLongWindow: the report's window is longer than MaxWindow. A
	// row whose window never ends (window_end 9999-01-01) was never
	// closed, and kept its key's periods from being billed (issue 37,
	// item 4).
	ReasonLongWindow Reason = "long_window"
)

// MaxWindow is the longest accounting window a report may have
// (window_end − window_start), and how long after its start the Closer
// takes any row's window to have ended, whatever its window_end says.
// Limiters' windows are a minute by default; a day leaves room for any
// plan's and keeps a forged window from holding a period open for more
// than a day.
const MaxWindow = 24 * time.Hour

var reasons = []Reason{ReasonInvalid, ReasonOutOfRange, ReasonSubject, ReasonRefused, ReasonTooOld, ReasonFuture, ReasonDetached,
	ReasonRefundExceeds, ReasonLongWindow}

// foundByWriting reports whether reason is found by writing, not by check
// (or, for ReasonRefundExceeds, is no refusal).
func foundByWriting(reason Reason) bool {
	return reason == ReasonRefused || reason == ReasonDetached || reason == ReasonRefundExceeds
}

// window is the range of window starts the reconciler accepts
// ([Oldest, Newest]); a zero bound is no bound.
type window struct{ oldest, newest time.Time }

// MaxCounter is the largest spent, rejected or degraded a report may carry,
// and the largest magnitude of leased (which may be negative: it is net of
// returned permits). It is 2^53-1, the largest integer exact as a float64
// (JSON clients of /v1/usage). The rows of one key and window are not
// bounded (processes, late rows), so sums of figures at the bound can pass
// the bigint range: the billing views, /v1/usage and the export add up in
// numeric and saturate (migration 011, the overflow guard), so that such a
// key gets a clear answer (billing.ErrOverflow; an export row that is not
// Complete) and every other key its usual one.
//
// Spent is not checked against leased: degraded decisions and the
// Reporter's late rows spend without leasing, and leased goes down when
// permits are returned, so no bound there would be safe for billing.
const MaxCounter = 1<<53 - 1

// checked is a report that passed check, with its place in its message's
// batch (-1 for a single-report message).
type checked struct {
	index int
	rep   ledger.Report
}

// badReport is a report of a batch that check refused.
type badReport struct {
	index  int
	rep    ledger.Report
	reason Reason
	err    error
}

// check decodes a message (its subject, ledger.HeaderEncoding header and
// body) and
// decides which of its reports the reconciler writes. An error means the
// whole message is refused (it cannot be read, or a single-report message's
// report is refused); otherwise each report of a batch is kept or refused
// on its own. The reports it returns have their times normalized (see
// normalize).
func check(prefix, subject, encoding string, data []byte, win window) (good []checked, bad []badReport, reason Reason, err error) {
	decoded, err := ledger.DecodeReports(encoding, data)
	if err != nil {
		return nil, nil, ReasonInvalid, err
	}
	if encoding == "" {
		rep := decoded[0].Report
		if reason, err := checkReport(prefix, subject, &rep, win); err != nil {
			return nil, nil, reason, err
		}
		return []checked{{-1, rep}}, nil, "", nil
	}
	good = make([]checked, 0, len(decoded))
	for _, d := range decoded {
		reason, err := ReasonInvalid, d.Err
		if err == nil {
			reason, err = checkReport(prefix, subject, &d.Report, win)
		}
		if err != nil {
			bad = append(bad, badReport{d.Index, d.Report, reason, err})
			continue
		}
		good = append(good, checked{d.Index, d.Report})
	}
	return good, bad, "", nil
}

// checkReport normalizes a decoded report's times and checks its figures,
// subject and window start (win).
func checkReport(prefix, subject string, rep *ledger.Report, win window) (Reason, error) {
	normalize(rep)
	if !rep.WindowEnd.After(rep.WindowStart) {
		return ReasonInvalid, fmt.Errorf("%w: window_end: %v not after window_start %v in whole microseconds",
			ledger.ErrInvalidReport, rep.WindowEnd, rep.WindowStart)
	}
	if d := rep.WindowEnd.Sub(rep.WindowStart); d > MaxWindow || d < 0 { // d < 0: the Sub saturated
		return ReasonLongWindow, fmt.Errorf("%w: window_end: window of %v from %v to %v is longer than %v",
			ledger.ErrInvalidReport, d, rep.WindowStart, rep.WindowEnd, MaxWindow)
	}
	if err := checkFigures(rep); err != nil {
		return ReasonOutOfRange, err
	}
	if err := checkSubject(prefix, subject, rep); err != nil {
		return ReasonSubject, err
	}
	if !win.oldest.IsZero() && rep.WindowStart.Before(win.oldest) {
		return ReasonTooOld, fmt.Errorf("%w: window_start %v before %v (max report age)",
			errWindow, rep.WindowStart, win.oldest)
	}
	if !win.newest.IsZero() && rep.WindowStart.After(win.newest) {
		return ReasonFuture, fmt.Errorf("%w: window_start %v after %v (max report skew)",
			errWindow, rep.WindowStart, win.newest)
	}
	return "", nil
}

// errWindow is wrapped by the errors of reports whose window is outside
// the accepted range.
var errWindow = errors.New("reconcile: window outside the accepted range")

// errOutOfRange is wrapped by checkFigures' errors.
var errOutOfRange = errors.New("reconcile: figure out of range")

// checkFigures refuses figures no process could produce: spent, rejected
// and degraded outside [0, MaxCounter], leased outside [-MaxCounter,
// MaxCounter]. (Negative counters and degraded > spent are already refused
// by ledger.Report.Validate.)
func checkFigures(r *ledger.Report) error {
	for _, f := range [...]struct {
		name     string
		v, floor int64
	}{
		{"spent", r.Spent, 0},
		{"rejected", r.Rejected, 0},
		{"degraded", r.Degraded, 0},
		{"would_reject", r.WouldReject, 0},
		{"refunded", r.Refunded, 0},
		{"charged", r.Charged, 0},
		{"leased", r.Leased, -MaxCounter},
	} {
		if f.v < f.floor || f.v > MaxCounter {
			return fmt.Errorf("%w: %s %d not in [%d, %d]", errOutOfRange, f.name, f.v, f.floor, int64(MaxCounter))
		}
	}
	return nil
}

// errSubject is wrapped by checkSubject's errors.
var errSubject = errors.New("reconcile: report does not match its subject")

// checkMsgID refuses a message whose ID (Nats-Msg-Id) is namespaced for
// another subject: the Reporter's IDs start with the subject they are
// published on and "|" (ledger.Reporter), so an ID under prefix naming
// another subject was made to squat that sender's IDs (issue 37, item 3).
// IDs not under prefix (older senders) pass.
func checkMsgID(prefix, subject, id string) error {
	if !strings.HasPrefix(id, prefix+".") {
		return nil
	}
	if ns, _, _ := strings.Cut(id, "|"); ns != subject {
		return fmt.Errorf("%w: message id %q is namespaced for %q, the message came on %q", errSubject, id, ns, subject)
	}
	return nil
}

// lateMark separates a process ID from the suffix of the Reporter's late
// rows ("<process>~late…", see ledger.Reporter).
const lateMark = "~late"

// checkSubject checks that a report was published on the subject of its
// own region and process, under prefix (the stream's SubjectPrefix):
//
//	<prefix>.<region>.<process>  ledger.StreamConfig.Subject
//
// The region is the subject's first token after prefix and must equal the
// report's Region. The rest names the process and must equal the report's
// ledger.Identity (its ProcessID without incarnation or late-row suffix),
// or, from Reporters before identities, its ProcessID without the late-row
// suffix. The shipped NATS configuration lets a limiter publish only on its
// own process's subject (Params.Processes; its region's, without them), so
// one process's credential writes only that process's rows. A subject
// without a process (<prefix>.<region>, limiters before per-process
// subjects) is refused: it would let a report claim any process of its
// region. Region names are subject tokens, so a report whose region has a
// dot is refused (on eu's subject <prefix>.eu.west.p1 it would otherwise
// claim a region "eu.west").
func checkSubject(prefix, subject string, r *ledger.Report) error {
	rest, ok := strings.CutPrefix(subject, prefix+".")
	if !ok || rest == "" {
		return fmt.Errorf("%w: subject %q is not under %q", errSubject, subject, prefix)
	}
	region, process, hasProcess := strings.Cut(rest, ".")
	if region != r.Region {
		return fmt.Errorf("%w: subject %q is region %q, the report's region is %q", errSubject, subject, region, r.Region)
	}
	if !hasProcess {
		return fmt.Errorf("%w: subject %q names no process, the report's process is %q", errSubject, subject, r.ProcessID)
	}
	if process == ledger.Identity(r.ProcessID) || process == r.ProcessID || strings.HasPrefix(r.ProcessID, process+lateMark) {
		return nil
	}
	return fmt.Errorf("%w: subject %q is process %q, the report's process is %q", errSubject, subject, process, r.ProcessID)
}

// normalize sets a report's times to what Postgres stores: whole
// microseconds (pgx cuts the nanoseconds off, rounding down) in UTC. Two
// reports whose window starts differ only below the microsecond are the
// same row of usage_reports, and must be merged as one.
func normalize(r *ledger.Report) {
	r.WindowStart = pgTime(r.WindowStart)
	r.WindowEnd = pgTime(r.WindowEnd)
	r.SentAt = pgTime(r.SentAt)
}

func pgTime(t time.Time) time.Time { return t.Truncate(time.Microsecond).UTC() }
