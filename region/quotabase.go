package region

import "github.com/quotaplatform/quota/limit"

// QuotaBase is what the ledger holds of one key's spending in one quota
// period: see limit.QuotaBase.
type QuotaBase = limit.QuotaBase

// QuotaBases reads quota bases from the ledger (Config.QuotaBases): see
// limit.QuotaBases.
type QuotaBases = limit.QuotaBases
