package billing

// The SQL that Ledger.Usage runs, for the EXPLAIN tests.
const (
	BucketSQL = bucketSQL
	WindowSQL = windowSQL
)

// QuotaSQL is the SQL that Ledger.Quotas runs, for the EXPLAIN tests.
const QuotaSQL = quotaSQL
