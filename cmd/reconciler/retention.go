package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5"
)

// retention runs the ledger's partition upkeep (ledger/README.md,
// "Partitions, retention and distribution"): it creates the month
// partitions of usage_reports from the current month to --ahead-months
// after it, then detaches the partitions older than the current month and
// the --keep-months before it, and prints each detached table's new name,
// one a line, for the operator to archive and drop. Run it from cron, e.g.
// daily; a second run the same day does nothing.
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
	detached, err := textRows(ctx, conn, `SELECT usage_retain_months($1)`, o.KeepMonths)
	if err != nil {
		return fmt.Errorf("retention: detach partitions: %w", err)
	}
	for _, name := range detached {
		if _, err := fmt.Fprintln(stdout, name); err != nil {
			return err
		}
	}
	log.Info("ledger retention done", "partitions_ahead", len(created), "detached", len(detached),
		"keep_months", o.KeepMonths, "ahead_months", o.AheadMonths)
	return nil
}

// textRows runs a query of one text column and returns its rows.
func textRows(ctx context.Context, conn *pgx.Conn, sql string, args ...any) ([]string, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
