// Package billing answers usage queries from the Postgres ledger: the totals
// of one key over a time range and a row per hour, day or accounting window,
// each flagged degraded (some cost was allowed while the store was
// unavailable) and complete (every process sent its final report). It serves
// them over HTTP (GET /v1/usage) as JSON or CSV, to bearer tokens only.
// Reads is the one HTTP path of every billing read, the quota reads'
// (GET /v1/usage/quotas) and package export's (GET /v1/usage/export) too:
// the bearer token, the parameters (Params, each error naming its field),
// the query and the answer in the negotiated format.
//
// Billing by period (docs/design.md [quotas]): for a key's plan (the
// catalogue's plans and assignments as ledger/planmirror mirrors them into
// quota_plans and quota_key_plans), each quota's period at an instant on
// the plan's calendar (time zone and anchor day, computed in SQL exactly as
// package period computes it), its limit, used and remaining (Ledger.Quotas,
// GET /v1/usage/quotas). Used is the billed cost of the windows that start
// in the period: the sum ledger/quotabase answers quota bases with.
//
// A window belongs to the bucket and range that hold its window_start
// (UTC); ranges are half-open [from, to).
//
// Who may read: an Access built from Tokens (ParseTokens reads the list
// syntax "TOKEN,prefix:PREFIX=TOKEN"); a token reads every key or only the
// keys that start with its prefix. No token configured means no one reads:
// the API is never open. Tokens are kept as SHA-256 digests and compared in
// constant time.
//
// What a query may cost: Config bounds the rows of an answer (counted
// before the query runs), the time of a query (a context deadline, and
// Postgres' statement_timeout on the connections of NewPool), and the
// connections billing takes (NewPool's own small pool, apart from the
// ingestion writer's).
//
// It owns no goroutines. Time enters as a query's from and to, or a quota
// query's at (QuotaHandler reads its Now, time.Now by default, only when a
// request names no at), and as Config.StatementTimeout, a deadline on
// each query. Access, Ledger, Reads and the handlers are safe for
// concurrent use. It does not write the ledger (ledger/reconcile
// does) and does not parse flags (cmd/reconciler does).
package billing
