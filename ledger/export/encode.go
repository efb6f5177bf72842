package export

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Format is an export's encoding.
type Format string

// Formats.
const (
	CSV    Format = "csv"
	NDJSON Format = "ndjson"
)

// ParseFormat parses "csv" or "ndjson".
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case CSV, NDJSON:
		return Format(s), nil
	}
	return "", fmt.Errorf("must be csv or ndjson, got %q", s)
}

// ContentType is f's media type.
func (f Format) ContentType() string {
	if f == CSV {
		return "text/csv; charset=utf-8"
	}
	return "application/x-ndjson"
}

// CSVHeader is the first line of a CSV export. The columns keep the places
// they had before refunds were billed (allowed, fifth, was headed spent);
// the billing columns (Row: refunded … carried_out) come after complete,
// then closed_by_reconciler and uncredited, the cursor last.
const CSVHeader = "key,period_start,period_end,granularity,allowed,rejected,degraded,windows,complete," +
	"refunded,charged,net,carried_in,billed,carried_out,closed_by_reconciler,uncredited,cursor"

// Encoder writes export rows as CSV or NDJSON, then one last line that
// says whether the export ended or failed:
//
//	CSV     a header (CSVHeader), a line per row, then "#end,<rows>" or
//	        "#error,<message>,<cursor>" (a key that starts with '#' is
//	        quoted, so these lines are never rows)
//	NDJSON  an object per row, then {"end":true,"rows":N} or
//	        {"error":"…","cursor":"…"}
//
// Every row carries the cursor that resumes after it. An export without
// its end line was cut: resume from the cursor of the last row read (the
// error line repeats it). Call Rows for each page and End or Fail once.
type Encoder struct {
	w      *bufio.Writer
	format Format
	g      Granularity
	rows   int64
	last   Cursor
	line   []byte // reused
}

// NewEncoder returns an Encoder writing format f to w, and writes the CSV
// header.
func NewEncoder(w io.Writer, f Format, g Granularity) *Encoder {
	e := &Encoder{w: bufio.NewWriterSize(w, 32<<10), format: f, g: g}
	if f == CSV {
		e.w.WriteString(CSVHeader + "\n")
	}
	return e
}

// Rows writes rows and flushes them to the underlying writer.
func (e *Encoder) Rows(rows []Row) error {
	for i := range rows {
		e.row(&rows[i])
	}
	return e.w.Flush()
}

// Count is the number of rows written.
func (e *Encoder) Count() int64 { return e.rows }

// Last is the cursor of the last row written (zero before any).
func (e *Encoder) Last() Cursor { return e.last }

func (e *Encoder) row(r *Row) {
	e.rows++
	e.last = r.Cursor()
	b := e.line[:0]
	if e.format == CSV {
		b = appendCSVField(b, r.Key)
		b = append(b, ',')
		b = r.PeriodStart.AppendFormat(b, time.RFC3339)
		b = append(b, ',')
		b = r.PeriodEnd.AppendFormat(b, time.RFC3339)
		b = append(b, ',')
		b = append(b, e.g...)
		for _, n := range []int64{r.Allowed, r.Rejected, r.Degraded, r.Windows} {
			b = append(b, ',')
			b = strconv.AppendInt(b, n, 10)
		}
		b = append(b, ',')
		b = strconv.AppendBool(b, r.Complete)
		for _, n := range r.billing() {
			b = append(b, ',')
			b = strconv.AppendInt(b, n, 10)
		}
		b = append(b, ',')
		b = strconv.AppendInt(b, r.ClosedByReconciler, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, r.Uncredited, 10)
		b = append(b, ',')
		b = append(b, e.last.String()...)
	} else {
		b = append(b, `{"key":`...)
		b = appendJSONString(b, r.Key)
		b = append(b, `,"period_start":"`...)
		b = r.PeriodStart.AppendFormat(b, time.RFC3339)
		b = append(b, `","period_end":"`...)
		b = r.PeriodEnd.AppendFormat(b, time.RFC3339)
		b = append(b, `","granularity":"`...)
		b = append(b, e.g...)
		b = append(b, '"')
		for i, n := range []int64{r.Allowed, r.Rejected, r.Degraded, r.Windows} {
			b = append(b, `,"`...)
			b = append(b, [...]string{"allowed", "rejected", "degraded", "windows"}[i]...)
			b = append(b, `":`...)
			b = strconv.AppendInt(b, n, 10)
		}
		b = append(b, `,"complete":`...)
		b = strconv.AppendBool(b, r.Complete)
		for i, n := range r.billing() {
			b = append(b, `,"`...)
			b = append(b, billingNames[i]...)
			b = append(b, `":`...)
			b = strconv.AppendInt(b, n, 10)
		}
		b = append(b, `,"closed_by_reconciler":`...)
		b = strconv.AppendInt(b, r.ClosedByReconciler, 10)
		b = append(b, `,"uncredited":`...)
		b = strconv.AppendInt(b, r.Uncredited, 10)
		b = append(b, `,"cursor":"`...)
		b = append(b, e.last.String()...)
		b = append(b, `"}`...)
	}
	b = append(b, '\n')
	e.w.Write(b)
	e.line = b
}

// billingNames are the JSON names and CSV columns of Row.billing, in order.
var billingNames = [...]string{"refunded", "charged", "net", "carried_in", "billed", "carried_out"}

// billing returns r's billing figures in the order of billingNames.
func (r *Row) billing() [len(billingNames)]int64 {
	return [...]int64{r.Refunded, r.Charged, r.Net, r.CarriedIn, r.Billed, r.CarriedOut}
}

// End writes the line that says the export is whole, and flushes.
func (e *Encoder) End() error {
	if e.format == CSV {
		fmt.Fprintf(e.w, "#end,%d\n", e.rows)
	} else {
		fmt.Fprintf(e.w, "{\"end\":true,\"rows\":%d}\n", e.rows)
	}
	return e.w.Flush()
}

// Fail writes the line that says the export stopped early, with msg and
// the cursor to resume from, and flushes.
func (e *Encoder) Fail(msg string) error {
	if e.format == CSV {
		b := appendCSVField([]byte("#error,"), msg)
		fmt.Fprintf(e.w, "%s,%s\n", b, e.last)
	} else {
		b := appendJSONString([]byte(`{"error":`), msg)
		fmt.Fprintf(e.w, "%s,\"cursor\":\"%s\"}\n", b, e.last)
	}
	return e.w.Flush()
}

// appendCSVField appends s as one CSV field, quoted when it holds a
// separator, a quote, a line break or leading blank, or starts with '#'.
func appendCSVField(b []byte, s string) []byte {
	if s == "" || (!strings.ContainsAny(s, ",\"\r\n") && s[0] != ' ' && s[0] != '\t' && s[0] != '#') {
		return append(b, s...)
	}
	b = append(b, '"')
	b = append(b, strings.ReplaceAll(s, `"`, `""`)...)
	return append(b, '"')
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
