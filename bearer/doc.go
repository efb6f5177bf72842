// Package bearer is the one implementation of the bearer tokens that guard
// the daemons' HTTP routes: what a token may look like, how a comma-separated
// list of them is read (several at once, for rotation), how a token is taken
// from an Authorization header, and how it is matched against the configured
// ones without leaking anything through timing. It keeps only SHA-256
// digests. limitapi (check, read and admin tokens) and ledger/billing
// (billing tokens, with key-prefix scopes on top) use it.
package bearer
