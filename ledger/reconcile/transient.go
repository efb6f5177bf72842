package reconcile

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// isTransient reports whether a failed Store call may succeed when retried
// unchanged. The reconciler retries transient failures with backoff; a
// batch that fails otherwise is split to find the reports Postgres refuses,
// which become dead letters (ReasonRefused).
//
// Permanent are only the errors Postgres attributes to the data written:
//   - SQLSTATE class 22, data exception (a value out of range, bad text);
//   - class 23, integrity constraint violation (check, not-null, unique…);
//   - 21000, cardinality violation ("ON CONFLICT DO UPDATE command cannot
//     affect row a second time": two reports of one row in a batch).
//
// Everything else is transient, known or not: connection errors, timeouts
// and cancellations (57014 included), serialization failures and deadlocks
// (40), resource and operator errors (53, 57), and schema or privilege
// errors (42, 3F, 28: a database that is not migrated or not granted is not
// the data's fault, and must not turn every report into a dead letter).
func isTransient(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) != 5 {
		return true
	}
	switch {
	case pe.Code == "21000":
		return false
	case pe.Code[:2] == "22", pe.Code[:2] == "23":
		return false
	}
	return true
}

// answered reports whether err is Postgres itself refusing a statement for
// now (a lock timeout, a cancelled statement, a resource it lacks), as
// opposed to Postgres being unreachable, shutting down or starting
// (connection errors, SQLSTATE classes 08 and 57P). When Postgres answers,
// other reports can be written meanwhile, so the Reconciler splits a batch
// that fails so instead of retrying it whole.
func answered(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || len(pe.Code) != 5 {
		return false
	}
	return pe.Code[:2] != "08" && pe.Code[:3] != "57P"
}

// parkAttempts is how many times a lone report is written, while Postgres
// answers with a transient error, before it is parked on the stream.
const parkAttempts = 3
