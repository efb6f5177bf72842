package billing

// The SQL that Ledger.Usage runs, for the EXPLAIN tests.
const (
	BucketSQL = bucketSQL
	WindowSQL = windowSQL
)
