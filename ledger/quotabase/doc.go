// Package quotabase is the ledger's answer to "what did this key spend in
// this quota period, by region": the base a region re-bases its quota
// counter on (docs/design.md [quotas]).
//
// A Server runs in the reconciler: it answers requests on a NATS subject
// (default "quota.base") in a queue group, so that any number of
// reconcilers share them, from the Postgres ledger (usage_reports, read by
// package pgledger), one query per request, partition-pruned on
// window_start and one index range on the key. A Client, in the limiters,
// implements limit.QuotaBases over a NATS connection: a request and its
// reply cross the NATS gateways from every region to the ledger region's
// reconcilers. This package links no Postgres driver (pgledger does), so
// the limiters that import it for the Client do not either.
//
// The wire format is JSON. A request is
//
//	{"key":"acct_1","start":"2026-11-01T00:00:00Z","end":"2026-12-01T00:00:00Z"}
//
// (RFC 3339 times; the usage windows that start in [start, end) count) and
// its reply either
//
//	{"total":1234,"by_region":{"eu":1000,"us":234},"as_of":"2026-11-17T09:30:00.123Z"}
//
// or an error, naming the request's field when the request is bad:
//
//	{"error":"must be after start","field":"end"}
//
// A key's spent cost in a window is what billing charges, net of refunds
// and with post-hoc charges (usage_reports spent + charged − refunded, as
// the ledger's views count it). A region whose reports sum to zero is
// absent from by_region.
//
// The Server bounds what requests can cost the ledger: at most
// Config.MaxConcurrent queries at once (past it a request is answered
// "busy" at once, never queued), each under Config.StatementTimeout, on a
// read-only pool of their own (pgledger.NewPool). It never logs a key above
// debug level.
package quotabase
