package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotaplatform/quota/ledger/sink"
)

// retention runs the ledger's partition upkeep (ledger/README.md,
// "Partitions, retention and distribution"): it creates the month
// partitions of usage_reports from the current month to --ahead-months
// after it, then detaches the partitions older than the current month and
// the --keep-months before it, and prints each detached table's new name,
// one a line, for the operator to archive and drop. Run it from cron, e.g.
// daily; a second run the same day does nothing.
//
// A month whose end still holds carried credit that some key has not used
// up (billing nets refunds with carry-over, ledger/export) is kept back,
// with the months after it: detaching it would drop the credit and raise
// the key's later bills. Each month kept back is logged (a warning naming
// the partition, the keys holding credit and their credit) and detached by
// a later run once the credit is used up (migration 011,
// usage_retention_holds).
func retention(ctx context.Context, o options, stdout io.Writer, log *slog.Logger) error {
	conn, err := pgx.Connect(ctx, o.Postgres)
	if err != nil {
		return fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	defer conn.Close(context.Background())
	created, err := textRows(ctx, conn, `SELECT usage_ensure_partitions(now(), now() + make_interval(months => $1))`, o.AheadMonths)
	if err != nil {
		return fmt.Errorf("retention: create partitions: %w", err)
	}
	cutoff := `date_trunc('month', now()) - make_interval(months => $1)`
	rows, err := conn.Query(ctx, `SELECT partition, month, keys, credit::text FROM usage_retention_holds(`+cutoff+`)`, o.KeepMonths)
	if err != nil {
		return fmt.Errorf("retention: months kept back for credit: %w", err)
	}
	holds, err := pgx.CollectRows(rows, pgx.RowToStructByPos[hold])
	if err != nil {
		return fmt.Errorf("retention: months kept back for credit: %w", err)
	}
	for _, h := range holds {
		log.Warn("ledger retention kept a month back: keys still hold carried credit from it (usage_open_credit)",
			"partition", h.Partition, "month", h.Month.UTC().Format("2006-01"), "keys", h.Keys, "credit", h.Credit)
	}
	detached, err := textRows(ctx, conn, `SELECT usage_retain_months($1)`, o.KeepMonths)
	if err != nil {
		return fmt.Errorf("retention: detach partitions: %w", err)
	}
	if o.MetricsFile != "" {
		if err := writeRetentionMetrics(o.MetricsFile, holds, len(detached)); err != nil {
			return fmt.Errorf("--metrics-file: %w", err)
		}
	}
	for _, name := range detached {
		if _, err := fmt.Fprintln(stdout, name); err != nil {
			return err
		}
	}
	if err := retainSinks(ctx, o, time.Now(), log); err != nil {
		return err
	}
	log.Info("ledger retention done", "partitions_ahead", len(created), "detached", len(detached), "kept_back", len(holds),
		"keep_months", o.KeepMonths, "ahead_months", o.AheadMonths)
	return nil
}

// writeRetentionMetrics writes the run's figures to file for
// node_exporter's textfile collector: the months kept back for open credit
// (alert QuotaRetentionKeptBack), the oldest of them, and the partitions
// detached.
func writeRetentionMetrics(file string, holds []hold, detached int) error {
	reg := prometheus.NewRegistry()
	kept := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "quota", Subsystem: "ledger_retention", Name: "kept_back_months",
		Help: "Months older than --keep-months that the last retention run kept attached because keys still hold carried credit from them."})
	oldest := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "quota", Subsystem: "ledger_retention", Name: "oldest_kept_back_month_timestamp_seconds",
		Help: "Start of the oldest month kept back for open credit (Unix time); 0 when none."})
	det := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "quota", Subsystem: "ledger_retention", Name: "detached_partitions",
		Help: "Partitions the last retention run detached."})
	reg.MustRegister(kept, oldest, det)
	kept.Set(float64(len(holds)))
	det.Set(float64(detached))
	if len(holds) > 0 { // newest first (usage_retention_holds)
		oldest.Set(float64(holds[len(holds)-1].Month.Unix()))
	}
	return prometheus.WriteToTextfile(file, reg)
}

// hold is a month retention keeps back (usage_retention_holds): at its
// end Keys keys hold Credit cost units of carried credit in all.
type hold struct {
	Partition string
	Month     time.Time
	Keys      int64
	Credit    string // numeric
}

// textRows runs a query of one text column and returns its rows.
func textRows(ctx context.Context, conn *pgx.Conn, sql string, args ...any) ([]string, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// retainSinks removes the sinks' acknowledged rows of periods that ended
// more than --sink-keep before now (sink.Retain), logging per sink what
// went; a sink whose run holds its lock is left for the next retention.
func retainSinks(ctx context.Context, o options, now time.Time, log *slog.Logger) error {
	if o.SinkKeep == 0 {
		return nil
	}
	pool, err := pgxpool.New(ctx, o.Postgres)
	if err != nil {
		return fmt.Errorf("--postgres %s: %w", redact(o.Postgres), err)
	}
	defer pool.Close()
	done, err := sink.Retain(ctx, pool, now.Add(-o.SinkKeep))
	for _, r := range done {
		if r.Busy {
			log.Warn("sink retention skipped a sink whose run is in progress; the next retention removes its rows", "sink", r.Sink)
			continue
		}
		log.Info("sink retention done", "sink", r.Sink, "removed_rows", r.Rows, "before", r.Before, "sink_keep", o.SinkKeep)
	}
	if err != nil {
		return fmt.Errorf("retention: sink rows: %w", err)
	}
	return nil
}
