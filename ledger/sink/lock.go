package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrRunning: another run of the same sink holds its lock. Two runs at
// once could send one revision with different data; the second fails at
// once instead of waiting.
var ErrRunning = errors.New("sink: another run of this sink is running")

// lockRun takes the sink's Postgres advisory lock (a session lock keyed by
// a hash of the sink name) on a connection of its own, held until unlock
// is called: the lock lives as long as that session, so a crashed run's
// lock goes with its connection.
func lockRun(ctx context.Context, db *pgxpool.Pool, sinkName string) (unlock func(), err error) {
	conn, err := db.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("sink %q: lock connection: %w", sinkName, err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, "quota-sink:"+sinkName).Scan(&ok); err != nil {
		conn.Release()
		return nil, fmt.Errorf("sink %q: lock: %w", sinkName, err)
	}
	if !ok {
		conn.Release()
		return nil, fmt.Errorf("%w: sink %q (pg_try_advisory_lock refused)", ErrRunning, sinkName)
	}
	return func() {
		// The run's ctx may be cancelled already; the unlock must still go.
		uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, "quota-sink:"+sinkName); err != nil {
			// The session may hold the lock still: close it, which frees it.
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}, nil
}
