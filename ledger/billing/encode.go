package billing

import (
	"encoding/csv"
	"encoding/json"
	"io"
	"strconv"
	"time"
)

// WriteJSON writes res as indented JSON.
func WriteJSON(w io.Writer, res Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// CSVHeader is the first line of WriteCSV's output.
var CSVHeader = []string{"key", "start", "end", "net", "leased", "rejected", "degraded_cost",
	"over_authorized", "windows", "degraded", "complete", "allowed", "refunded", "charged",
	"closed_by_reconciler"}

// WriteCSV writes res as CSV: a header, a line per bucket, and a last line
// whose start is "total". net, fourth, is allowed + charged − refunded
// (the three columns after complete). Until this release the fourth
// column was headed spent, net's old name, and net was repeated last: net
// took spent's place, so a reader by position still reads the net there,
// and the last column went, so one reading it fails instead of reading
// another figure. closed_by_reconciler counts the windows the reconciler
// closed for a dead process (Row.ClosedByReconciler).
func WriteCSV(w io.Writer, res Result) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(CSVHeader)
	n := strconv.FormatInt
	line := func(start, end string, t Totals, windows int, degraded, complete bool, closed int) {
		_ = cw.Write([]string{res.Key, start, end, n(t.Net, 10), n(t.Leased, 10), n(t.Rejected, 10),
			n(t.Degraded, 10), n(t.OverAuthorized, 10), strconv.Itoa(windows),
			strconv.FormatBool(degraded), strconv.FormatBool(complete),
			n(t.Allowed, 10), n(t.Refunded, 10), n(t.Charged, 10), strconv.Itoa(closed)})
	}
	windows := 0
	for _, r := range res.Rows {
		line(r.Start.Format(time.RFC3339), r.End.Format(time.RFC3339), r.Totals, r.Windows, r.IsDegraded, r.Complete,
			r.ClosedByReconciler)
		windows += r.Windows
	}
	line("total", "", res.Totals, windows, res.IsDegraded, res.Complete, res.ClosedByReconciler)
	cw.Flush()
	return cw.Error()
}
