package planmirror

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/quotaplatform/quota/catalog"
)

// DB is what the mirror writes through: *pgxpool.Pool is one.
type DB interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// upsertPlans writes plan rows, each only over an earlier revision.
const upsertPlans = `INSERT INTO quota_plans AS p (name, quotas, time_zone, anchor_day, deleted, revision, updated_at)
SELECT u.name, u.quotas::jsonb, u.time_zone, u.anchor_day, u.deleted, u.revision, now()
FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::bool[], $6::bigint[])
     AS u(name, quotas, time_zone, anchor_day, deleted, revision)
ON CONFLICT (name) DO UPDATE SET quotas = EXCLUDED.quotas, time_zone = EXCLUDED.time_zone, anchor_day = EXCLUDED.anchor_day,
    deleted = EXCLUDED.deleted, revision = EXCLUDED.revision, updated_at = EXCLUDED.updated_at
WHERE p.revision < EXCLUDED.revision`

// upsertKeys writes assignment rows, each only over an earlier revision.
const upsertKeys = `INSERT INTO quota_key_plans AS k (key, plan, deleted, revision, updated_at)
SELECT u.key, CASE WHEN u.deleted THEN NULL ELSE u.plan END, u.deleted, u.revision, now()
FROM unnest($1::text[], $2::text[], $3::bool[], $4::bigint[]) AS u(key, plan, deleted, revision)
ON CONFLICT (key) DO UPDATE SET plan = EXCLUDED.plan, deleted = EXCLUDED.deleted, revision = EXCLUDED.revision,
    updated_at = EXCLUDED.updated_at
WHERE k.revision < EXCLUDED.revision`

// tombstonePlans and tombstoneKeys delete, at revision $2, the live rows
// the bucket's full state ($1, the names it holds) no longer has.
const (
	tombstonePlans = `UPDATE quota_plans p SET deleted = true, quotas = '[]', revision = $2, updated_at = now()
WHERE NOT p.deleted AND p.revision < $2 AND NOT EXISTS (SELECT 1 FROM unnest($1::text[]) AS s(name) WHERE s.name = p.name)`
	tombstoneKeys = `UPDATE quota_key_plans k SET deleted = true, plan = NULL, revision = $2, updated_at = now()
WHERE NOT k.deleted AND k.revision < $2 AND NOT EXISTS (SELECT 1 FROM unnest($1::text[]) AS s(key) WHERE s.key = k.key)`
)

// latest keeps each entry's latest change, in revision order.
func latest(changes []change) []change {
	byEntry := make(map[[2]string]int, len(changes))
	var out []change
	for _, c := range changes {
		id := [2]string{string(c.kind), c.name}
		if i, ok := byEntry[id]; ok {
			if c.revision > out[i].revision {
				out[i] = c
			}
			continue
		}
		byEntry[id] = len(out)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b change) int {
		switch {
		case a.revision < b.revision:
			return -1
		case a.revision > b.revision:
			return 1
		}
		return 0
	})
	return out
}

// write applies changes in one transaction. When full is set, changes are
// the bucket's whole state as of revision asOf, and every live row they do
// not name is tombstoned at asOf.
func write(ctx context.Context, db DB, changes []change, full bool, asOf uint64) error {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return fmt.Errorf("planmirror: begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit it is a no-op
	if err := writeTx(ctx, tx, latest(changes), full, asOf); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("planmirror: commit: %w", err)
	}
	return nil
}

func writeTx(ctx context.Context, tx pgx.Tx, changes []change, full bool, asOf uint64) error {
	var (
		pNames, pQuotas, pZones []string
		pAnchors                []int32
		pDeleted                []bool
		pRevs                   []int64
		kKeys, kPlans           []string
		kDeleted                []bool
		kRevs                   []int64
		livePlans, liveKeys     = []string{}, []string{}
	)
	for _, c := range changes {
		switch c.kind {
		case catalog.KindPlan:
			pNames = append(pNames, c.name)
			pQuotas = append(pQuotas, quotaJSON(c.plan))
			pZones = append(pZones, c.plan.TimeZone)
			pAnchors = append(pAnchors, int32(c.plan.AnchorDay))
			pDeleted = append(pDeleted, c.deleted)
			pRevs = append(pRevs, int64(c.revision))
			if !c.deleted {
				livePlans = append(livePlans, c.name)
			}
		case catalog.KindKey:
			kKeys = append(kKeys, c.name)
			kPlans = append(kPlans, c.to)
			kDeleted = append(kDeleted, c.deleted)
			kRevs = append(kRevs, int64(c.revision))
			if !c.deleted {
				liveKeys = append(liveKeys, c.name)
			}
		}
	}
	if len(pNames) > 0 {
		if _, err := tx.Exec(ctx, upsertPlans, pNames, pQuotas, pZones, pAnchors, pDeleted, pRevs); err != nil {
			return fmt.Errorf("planmirror: write plans: %w", err)
		}
	}
	if len(kKeys) > 0 {
		if _, err := tx.Exec(ctx, upsertKeys, kKeys, kPlans, kDeleted, kRevs); err != nil {
			return fmt.Errorf("planmirror: write key assignments: %w", err)
		}
	}
	if !full {
		return nil
	}
	if _, err := tx.Exec(ctx, tombstonePlans, livePlans, int64(asOf)); err != nil {
		return fmt.Errorf("planmirror: delete plans the bucket no longer holds: %w", err)
	}
	if _, err := tx.Exec(ctx, tombstoneKeys, liveKeys, int64(asOf)); err != nil {
		return fmt.Errorf("planmirror: delete key assignments the bucket no longer holds: %w", err)
	}
	return nil
}
