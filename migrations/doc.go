// Package migrations holds the ledger's Postgres schema as numbered SQL files
// (tern format: NNN_name.sql, "---- create above / drop below ----" between
// the up and down parts), embedded in the binary, and applies them with
// jackc/tern (`reconciler migrate`). Add a change as the next number; never
// edit an applied file.
package migrations
