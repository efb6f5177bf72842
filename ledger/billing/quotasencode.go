package billing

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"
)

// WriteQuotasJSON writes res as indented JSON.
func WriteQuotasJSON(w io.Writer, res QuotaResult) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// QuotaCSVHeader is the first line of WriteQuotasCSV's output.
var QuotaCSVHeader = []string{"key", "plan", "time_zone", "anchor_day", "at", "period", "start", "end", "limit", "used", "remaining"}

// WriteQuotasCSV writes res as CSV: a header and a line per quota (none
// for a key whose plan has no quotas).
func WriteQuotasCSV(w io.Writer, res QuotaResult) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(QuotaCSVHeader)
	n := strconv.FormatInt
	for _, q := range res.Quotas {
		_ = cw.Write([]string{res.Key, res.Plan, res.TimeZone, strconv.Itoa(res.AnchorDay), res.At.Format(time.RFC3339Nano),
			string(q.Period), q.Start.Format(time.RFC3339), q.End.Format(time.RFC3339), n(q.Limit, 10), n(q.Used, 10), n(q.Remaining, 10)})
	}
	cw.Flush()
	return cw.Error()
}

// WriteQuotasText writes res for a person: a line naming the key, plan
// and calendar, then a table of the quotas with their periods' bounds in
// the plan's zone.
func WriteQuotasText(w io.Writer, res QuotaResult) error {
	plan, zone := res.Plan, res.TimeZone
	if plan == "" {
		plan = "(none)"
	}
	if zone == "" {
		zone = "UTC"
	}
	anchor := res.AnchorDay
	if anchor == 0 {
		anchor = 1
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		loc = time.UTC
	}
	if _, err := fmt.Fprintf(w, "key %s  plan %s  time zone %s  months from day %d  at %s\n",
		res.Key, plan, zone, anchor, res.At.Format(time.RFC3339)); err != nil {
		return err
	}
	if len(res.Quotas) == 0 {
		_, err := fmt.Fprintln(w, "no quotas")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "period\tstart\tend\tlimit\tused\tremaining\t")
	for _, q := range res.Quotas {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t\n", q.Period,
			q.Start.In(loc).Format("2006-01-02 15:04 -07:00"), q.End.In(loc).Format("2006-01-02 15:04 -07:00"),
			q.Limit, q.Used, q.Remaining)
	}
	return tw.Flush()
}
