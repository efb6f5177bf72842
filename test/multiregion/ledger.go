package multiregion

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// LedgerRow is the ledger's view of one (process, key): spent and degraded
// cost summed over its windows, the windows, and those without a final
// report.
type LedgerRow struct {
	Spent, Degraded, Rejected int64
	Windows, NotFinal         int
}

// Ledger is the ledger's usage by process (the harness's --process-id, the
// reporter's incarnation suffix stripped) and key.
type Ledger map[string]map[string]LedgerRow

// ReadLedger reads usage_reports.
func (c *Cluster) ReadLedger(ctx context.Context) (Ledger, error) {
	conn, err := pgx.Connect(ctx, c.pgURL)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT process_id, key, sum(spent)::bigint, sum(degraded)::bigint, sum(rejected)::bigint,
		count(*)::int, count(*) FILTER (WHERE NOT final)::int
		FROM usage_reports GROUP BY process_id, key`)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	defer rows.Close()
	out := Ledger{}
	for rows.Next() {
		var (
			proc, key string
			r         LedgerRow
		)
		if err := rows.Scan(&proc, &key, &r.Spent, &r.Degraded, &r.Rejected, &r.Windows, &r.NotFinal); err != nil {
			return nil, fmt.Errorf("ledger: %w", err)
		}
		proc, _, _ = strings.Cut(proc, "@")
		m := out[proc]
		if m == nil {
			m = map[string]LedgerRow{}
			out[proc] = m
		}
		cur := m[key]
		cur.Spent += r.Spent
		cur.Degraded += r.Degraded
		cur.Rejected += r.Rejected
		cur.Windows += r.Windows
		cur.NotFinal += r.NotFinal
		m[key] = cur
	}
	return out, rows.Err()
}

// withPrefix keeps the keys that start with prefix.
func (l Ledger) withPrefix(prefix string) Ledger {
	out := Ledger{}
	for p, m := range l {
		for k, r := range m {
			if strings.HasPrefix(k, prefix) {
				if out[p] == nil {
					out[p] = map[string]LedgerRow{}
				}
				out[p][k] = r
			}
		}
	}
	return out
}

// ShortenFinalGrace replaces the ledger's usage_final_grace() (2 minutes)
// in this cluster's own database, so that a crashed process's windows count
// as incomplete within a short test.
func (c *Cluster) ShortenFinalGrace(ctx context.Context, d time.Duration) error {
	conn, err := pgx.Connect(ctx, c.pgURL)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, fmt.Sprintf(`CREATE OR REPLACE FUNCTION usage_final_grace() RETURNS interval
		LANGUAGE sql IMMUTABLE AS $$ SELECT interval '%d milliseconds' $$`, d.Milliseconds()))
	if err != nil {
		return fmt.Errorf("ledger: replace usage_final_grace: %w", err)
	}
	return nil
}

// IncompleteProcesses returns the processes (suffix stripped) with a row in
// usage_incomplete_windows for a key starting with prefix, with their count.
func (c *Cluster) IncompleteProcesses(ctx context.Context, prefix string) (map[string]int, error) {
	conn, err := pgx.Connect(ctx, c.pgURL)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT process_id, count(*)::int FROM usage_incomplete_windows
		WHERE starts_with(key, $1) GROUP BY process_id`, prefix)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var (
			p string
			n int
		)
		if err := rows.Scan(&p, &n); err != nil {
			return nil, err
		}
		p, _, _ = strings.Cut(p, "@")
		out[p] += n
	}
	return out, rows.Err()
}

// LedgerCheck compares the ledger with what the clients saw.
type LedgerCheck struct {
	// Wired: the ledger holds any report at all (the daemon has a
	// Reporter).
	Wired bool
	// ClientAllowed and LedgerSpent are totals over the live (not crashed)
	// processes; Mismatches lists (process, key) pairs that differ.
	ClientAllowed, LedgerSpent int64
	Mismatches                 []string
	// ClientDegraded and LedgerDegraded: degraded cost (live processes).
	ClientDegraded, LedgerDegraded int64
	// CrashedClient and CrashedLedger: the crashed processes' allowed cost
	// as clients saw it and as the ledger has it (short by what they spent
	// after their last report).
	CrashedClient, CrashedLedger int64
	// CrashedNotFinal counts the crashed processes' windows without a final
	// report; LiveNotFinal the same for the others (windows still open when
	// read).
	CrashedNotFinal, LiveNotFinal int
}

// Exact reports whether the live processes' ledger equals the clients'.
func (l LedgerCheck) Exact() bool { return l.Wired && len(l.Mismatches) == 0 }

// CompareLedger waits (up to timeout) until the ledger's spent per process
// and key equals what the clients saw allowed, for every process not in
// crashed, and returns the comparison as it stands then.
func (c *Cluster) CompareLedger(rec *Record, prefix string, crashed map[string]bool, timeout time.Duration) LedgerCheck {
	deadline := time.Now().Add(timeout)
	clientAllowed := rec.AllowedByProcess()
	clientDegraded := rec.DegradedByProcess()
	var lc LedgerCheck
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		led, err := c.ReadLedger(ctx)
		cancel()
		lc = LedgerCheck{}
		if err != nil {
			lc.Mismatches = []string{err.Error()}
		} else {
			lc = compareLedger(clientAllowed, clientDegraded, led.withPrefix(prefix), crashed)
		}
		if lc.Exact() || time.Now().After(deadline) {
			return lc
		}
		time.Sleep(250 * time.Millisecond) // poll interval of a deadline-bounded wait
	}
}

func compareLedger(allowed, degraded map[string]map[string]int64, led Ledger, crashed map[string]bool) LedgerCheck {
	var lc LedgerCheck
	lc.Wired = len(led) > 0
	procs := map[string]bool{}
	for p := range allowed {
		procs[p] = true
	}
	for p := range led {
		procs[p] = true
	}
	names := make([]string, 0, len(procs))
	for p := range procs {
		names = append(names, p)
	}
	sort.Strings(names)
	for _, p := range names {
		keys := map[string]bool{}
		for k := range allowed[p] {
			keys[k] = true
		}
		for k := range led[p] {
			keys[k] = true
		}
		for k := range keys {
			cl, lr := allowed[p][k], led[p][k]
			if crashed[p] {
				lc.CrashedClient += cl
				lc.CrashedLedger += lr.Spent
				lc.CrashedNotFinal += lr.NotFinal
				continue
			}
			lc.ClientAllowed += cl
			lc.LedgerSpent += lr.Spent
			lc.ClientDegraded += degraded[p][k]
			lc.LedgerDegraded += lr.Degraded
			lc.LiveNotFinal += lr.NotFinal
			if cl != lr.Spent || degraded[p][k] != lr.Degraded {
				if len(lc.Mismatches) < 10 {
					lc.Mismatches = append(lc.Mismatches, fmt.Sprintf("%s/%s: clients allowed %d (degraded %d), ledger spent %d (degraded %d)",
						p, k, cl, degraded[p][k], lr.Spent, lr.Degraded))
				} else if len(lc.Mismatches) == 10 {
					lc.Mismatches = append(lc.Mismatches, "…")
				}
			}
		}
	}
	return lc
}
