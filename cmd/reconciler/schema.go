package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"

	"github.com/quotaplatform/quota/migrations"
)

// schemaCheck says whether the ledger's schema has reached the version
// this binary's migrations bring it to. Until it has, serve is not ready:
// a reconciler on an unmigrated or older schema would fail or misplace
// its writes, and the fix is the operator's (`reconciler migrate`).
type schemaCheck struct {
	pool *pgxpool.Pool
	ok   atomic.Bool // once reached, it stays: migrations only go forward
}

func newSchemaCheck(pool *pgxpool.Pool) *schemaCheck { return &schemaCheck{pool: pool} }

// check is nil once the schema is at migrations.Latest or newer.
func (s *schemaCheck) check(ctx context.Context) error {
	if s.ok.Load() {
		return nil
	}
	v, err := migrations.Current(ctx, s.pool)
	if err != nil {
		return fmt.Errorf("ledger schema: %w", err)
	}
	if want := migrations.Latest(); v < want {
		if v == 0 {
			return fmt.Errorf("the ledger schema is not migrated (this reconciler needs version %d): run `reconciler migrate`", want)
		}
		return fmt.Errorf("the ledger schema is at version %d, this reconciler needs %d: run `reconciler migrate`", v, want)
	}
	s.ok.Store(true)
	return nil
}

// schemaRecheck is how often serve checks a schema it found behind,
// so that its log says when `reconciler migrate` has run.
const schemaRecheck = 5 * time.Second

// runSchemaCheck checks the schema from the start, and every
// schemaRecheck until it is current, logging each new verdict: an error
// naming `reconciler migrate` while it is behind.
func runSchemaCheck(lc fx.Lifecycle, s *schemaCheck, log *slog.Logger) {
	runInBackground(lc, "schema check", func(ctx context.Context) error {
		last := ""
		tick := time.NewTicker(schemaRecheck)
		defer tick.Stop()
		for {
			cctx, cancel := context.WithTimeout(ctx, schemaRecheck)
			err := s.check(cctx)
			cancel()
			switch {
			case err == nil:
				if last != "" {
					log.Info("ledger schema migrated", "version", migrations.Latest())
				}
				return nil
			case ctx.Err() != nil:
				return ctx.Err()
			case err.Error() != last:
				last = err.Error()
				log.Error("not ready", "err", err)
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}, log)
}
