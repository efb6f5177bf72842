package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotaplatform/quota/ledger/billing"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/sink"
)

// exporter returns an export.Exporter on a one-connection read-only
// billing pool, each page's query bounded by --billing-statement-timeout.
func exporter(o options) (*export.Exporter, *pgxpool.Pool, error) {
	cfg := o.billingConfig()
	cfg.MaxConns = 1
	pool, err := billing.NewPool(o.Postgres, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	ecfg := export.DefaultConfig()
	ecfg.StatementTimeout = o.BillingStatementTimeout
	ex, err := export.New(pool, ecfg)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return ex, pool, nil
}

// exportCmd prints every key's usage per period of --month, as GET
// /v1/usage/export does, straight from Postgres (its --postgres
// credentials are its authorization).
func exportCmd(ctx context.Context, o options, stdout io.Writer) error {
	from, to, _ := o.month()
	ex, pool, err := exporter(o)
	if err != nil {
		return err
	}
	defer pool.Close()
	g := export.Granularity(o.Granularity)
	enc := export.NewEncoder(stdout, export.Format(o.Format), g)
	err = ex.Export(ctx, export.Query{From: from, To: to, Granularity: g, Now: time.Now()}, enc.Rows)
	if err != nil {
		_ = enc.Fail(err.Error())
		return err
	}
	return enc.End()
}

// events sends --month's closed periods to --sink (sink.Publisher) and
// writes --metrics-file.
func events(ctx context.Context, o options, log *slog.Logger) error {
	from, to, _ := o.month()
	ex, bpool, err := exporter(o)
	if err != nil {
		return err
	}
	defer bpool.Close()
	pool, err := pgxpool.New(ctx, o.Postgres)
	if err != nil {
		return fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	defer pool.Close()
	kind, target, _ := o.sinkTarget()
	var sender sink.Sender
	if kind == "nats" {
		opts, err := natsOptions(o, log)
		if err != nil {
			return err
		}
		nc, err := nats.Connect(o.NATS, append(opts, nats.RetryOnFailedConnect(false))...)
		if err != nil {
			return fmt.Errorf("--nats %s: %w", redact(o.NATS), err)
		}
		defer nc.Close()
		js, err := jetstream.New(nc)
		if err != nil {
			return fmt.Errorf("jetstream: %w", err)
		}
		if sender, err = sink.NewNATS(js, target); err != nil {
			return err
		}
	} else if sender, err = sink.NewHTTP(target, 10*time.Second); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	p, err := sink.NewPublisher(pool, ex, sender, sink.Config{Sink: o.sinkName(), Granularity: export.Granularity(o.Granularity),
		Metrics: sink.NewMetrics(reg), Logger: log})
	if err != nil {
		return err
	}
	st, runErr := p.Run(ctx, from, to, time.Now())
	log.Info("usage events run", "sink", o.sinkName(), "month", o.Month, "sent", st.Sent, "corrections", st.Corrections,
		"resent", st.Resent, "unchanged", st.Unchanged, "open", st.Open, "difference", st.Difference)
	if o.MetricsFile != "" {
		if err := prometheus.WriteToTextfile(o.MetricsFile, reg); err != nil {
			return errors.Join(runErr, fmt.Errorf("--metrics-file: %w", err))
		}
	}
	return runErr
}

// sinksReport prints, per sink and period of --month, the ledger's spent
// against what the sink acknowledged, as CSV.
func sinksReport(ctx context.Context, o options, stdout io.Writer) error {
	from, to, _ := o.month()
	pool, err := billing.NewPool(o.Postgres, o.billingConfig())
	if err != nil {
		return fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	defer pool.Close()
	name := ""
	if o.Sink != "" {
		name = o.sinkName()
	}
	rows, err := sink.Report(ctx, pool, name, export.Granularity(o.Granularity), from, to, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "sink,period_start,ledger_spent,closed_spent,acked_spent,difference,unacked_keys")
	for _, r := range rows {
		if _, err := fmt.Fprintf(stdout, "%s,%s,%d,%d,%d,%d,%d\n", r.Sink, r.PeriodStart.Format(time.RFC3339),
			r.Ledger, r.Closed, r.Acked, r.Difference(), r.Unacked); err != nil {
			return err
		}
	}
	return nil
}
