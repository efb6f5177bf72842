package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/settings"
	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/sink"
)

// Finance's reads (issue 36): a period's audit trail, what the next
// Stripe run would send, a customer's statement. Each reads Postgres
// through a read-only pool (billing.NewPool): none can write.

// isFinanceCommand reports whether name is one of finance's reads.
func isFinanceCommand(name string) bool {
	return name == "audit" || name == "preview" || name == "statement"
}

func declareAudit(s *settings.Set, o *stripeOptions) {
	s.String(&o.Key, "key", "", "API key (required)").
		Check(func() error { return want(o.Key != "", "required") })
	declareFinanceMonth(s, &o.options)
	s.String(&o.Meter, "meter", "", "only this Stripe meter's events (default: every sink's)")
	declareFinanceFormat(s, &o.options)
}

func declarePreview(s *settings.Set, o *stripeOptions) {
	declarePeriods(s, &o.options, "period: hour, day or month, as the stripe-sync run previewed")
	s.Bool(&o.Continuous, "continuous", false, "preview the next --continuous pass (the current UTC month, read incrementally) instead of a run over --month")
	s.Duration(&o.Lookback, "lookback", 0, "as stripe-sync's --lookback")
	s.Duration(&o.FinalizationGrace, "finalization-grace", sink.DefaultFinalizationGrace, "as stripe-sync's --finalization-grace").
		Check(func() error {
			return want(o.FinalizationGrace >= 0 && o.FinalizationGrace <= sink.MaxFinalizationGrace,
				"must be 0 to %v, got %v", sink.MaxFinalizationGrace, o.FinalizationGrace)
		})
	declareMeter(s, o)
	declareFinanceFormat(s, &o.options)
}

func declareStatement(s *settings.Set, o *stripeOptions) {
	s.String(&o.Customer, "customer", "", "Stripe customer id, cus_… (required)").
		Check(func() error { return want(o.Customer != "", "required") })
	declareFinanceMonth(s, &o.options)
	declareStatementTimeout(s, &o.options, "longest query of one page of keys")
	declareFinanceFormat(s, &o.options)
}

func declareFinanceMonth(s *settings.Set, o *options) {
	s.String(&o.Month, "month", "", "the UTC month, e.g. 2026-11 (required)").
		Check(func() error {
			_, _, err := o.month()
			return err
		})
}

func declareFinanceFormat(s *settings.Set, o *options) {
	s.String(&o.Format, "format", "csv", "csv or json").
		Check(func() error {
			return want(o.Format == "csv" || o.Format == "json", "must be csv or json, got %q", o.Format)
		})
}

// financeCmd runs audit, preview or statement.
func financeCmd(cmd string, args []string, stdout, stderr io.Writer) error {
	o, err := parseStripeFlags(cmd, args, stderr)
	if err != nil {
		return err
	}
	if cmd == "preview" {
		errs := o.checkSinkRun()
		if _, _, err := o.month(); err != nil && !o.Continuous {
			errs = append(errs, fmt.Errorf("--month: %v", err))
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	ctx, stop, log, err := startCommand(stderr, o.LogLevel)
	if err != nil {
		return err
	}
	defer stop()
	switch cmd {
	case "audit":
		return auditCmd(ctx, o, stdout)
	case "preview":
		return previewCmd(ctx, o, stdout, log)
	}
	return statementCmd(ctx, o, stdout)
}

// auditCmd prints --key's audit trail for the periods that start in
// --month, oldest first.
func auditCmd(ctx context.Context, o stripeOptions, stdout io.Writer) error {
	pool, err := billing.NewPool(o.Postgres, o.billingConfig())
	if err != nil {
		return fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	defer pool.Close()
	from, to, _ := o.month()
	q := sink.AuditQuery{Key: o.Key, From: from, To: to}
	if o.Meter != "" {
		q.Sink = sink.StripeSinkName(o.Meter)
	}
	trail, err := sink.Audit(ctx, pool, q)
	if err != nil {
		return err
	}
	if o.Format == "json" {
		return json.NewEncoder(stdout).Encode(trail)
	}
	var b []byte
	b = append(b, "id,at,sink,key,period_start,period_end,granularity,revision,event_id,action,status,billed,acked,attempts,status_code,decision,frame,answer\n"...)
	for _, e := range trail {
		b = appendCSV(b, strconv.FormatInt(e.ID, 10), e.At.Format(time.RFC3339Nano), e.Sink, e.Key,
			e.PeriodStart.Format(time.RFC3339), e.PeriodEnd.Format(time.RFC3339), e.Granularity, strconv.Itoa(e.Revision),
			e.EventID, e.Action, e.Status, strconv.FormatInt(e.Billed, 10), strconv.FormatInt(e.Acked, 10),
			strconv.Itoa(e.Attempts), strconv.Itoa(e.StatusCode), e.Decision, string(e.Frame), e.Answer)
	}
	_, err = stdout.Write(b)
	return err
}

// previewCmd prints what the next stripe-sync run of --meter over
// --month (or the next --continuous pass) would send, per customer, as
// sink.PreviewStripe computes it: no row written, no request to Stripe.
func previewCmd(ctx context.Context, o stripeOptions, stdout io.Writer, log *slog.Logger) error {
	ex, pool, err := exporter(o.options)
	if err != nil {
		return err
	}
	defer pool.Close()
	g := export.Granularity(o.Granularity)
	now := clock.System().Now()
	from, to := o.passRange(g, now)
	cfg := sink.StripeConfig{Meter: o.Meter, Granularity: g, FinalizationGrace: o.FinalizationGrace, Lookback: o.Lookback,
		Calendar: export.Calendar(o.Calendar), Incremental: o.Continuous}
	planned, st, err := sink.PreviewStripe(ctx, pool, ex, cfg, from, to, now)
	if err != nil {
		return err
	}
	if len(st.Held) > 0 || st.UnmappedKeys > 0 {
		log.Warn("the run would send these, and leave some for a person", "held", len(st.Held), "unmapped_keys", st.UnmappedKeys)
	}
	slices.SortStableFunc(planned, func(a, b sink.PlannedEvent) int { return strings.Compare(a.Customer, b.Customer) })
	if o.Format == "json" {
		return json.NewEncoder(stdout).Encode(planned)
	}
	var b []byte
	b = append(b, "customer,key,period_start,period_end,kind,revision,event_id,billed,value,timestamp,identifier\n"...)
	for _, e := range planned {
		b = appendCSV(b, e.Customer, e.Key, e.PeriodStart.Format(time.RFC3339), e.PeriodEnd.Format(time.RFC3339), e.Kind,
			strconv.Itoa(e.Revision), e.EventID, strconv.FormatInt(e.Billed, 10), strconv.FormatInt(e.Value, 10),
			e.Timestamp.Format(time.RFC3339), e.Identifier)
	}
	_, err = stdout.Write(b)
	return err
}

// statementCmd prints --customer's statement for --month: each key
// billed to it, by the dated mappings, and the total.
func statementCmd(ctx context.Context, o stripeOptions, stdout io.Writer) error {
	ex, pool, err := exporter(o.options)
	if err != nil {
		return err
	}
	defer pool.Close()
	from, to, _ := o.month()
	st, err := sink.CustomerStatement(ctx, pool, ex, o.Customer, from, to, time.Now())
	if err != nil {
		return fmt.Errorf("--customer: %w", err)
	}
	if o.Format == "json" {
		return json.NewEncoder(stdout).Encode(st)
	}
	var b []byte
	b = append(b, "customer,key,period_start,period_end,allowed,charged,refunded,net,billed,complete\n"...)
	line := func(key, start, end string, allowed, charged, refunded, net, billed int64, complete string) {
		b = appendCSV(b, st.Customer, key, start, end, strconv.FormatInt(allowed, 10), strconv.FormatInt(charged, 10),
			strconv.FormatInt(refunded, 10), strconv.FormatInt(net, 10), strconv.FormatInt(billed, 10), complete)
	}
	for _, l := range st.Lines {
		line(l.Key, l.PeriodStart.Format(time.RFC3339), l.PeriodEnd.Format(time.RFC3339), l.Allowed, l.Charged, l.Refunded,
			l.Net, l.Billed, strconv.FormatBool(l.Complete))
	}
	t := st.Total
	line("#total", from.Format(time.RFC3339), to.Format(time.RFC3339), t.Allowed, t.Charged, t.Refunded, t.Net, t.Billed, "")
	_, err = stdout.Write(b)
	return err
}

// appendCSV appends one CSV record of fields, quoting those that need it.
func appendCSV(b []byte, fields ...string) []byte {
	for i, f := range fields {
		if i > 0 {
			b = append(b, ',')
		}
		if strings.ContainsAny(f, ",\"\n\r") {
			b = append(b, '"')
			b = append(b, strings.ReplaceAll(f, `"`, `""`)...)
			b = append(b, '"')
			continue
		}
		b = append(b, f...)
	}
	return append(b, '\n')
}
