package participant

import (
	"fmt"

	"github.com/quotaplatform/quota/ledger/quotabase"
	"github.com/quotaplatform/quota/region"
)

// newQuotaBases is where the participant reads quota bases from
// (docs/design.md [quotas]): Options.QuotaBases when set; otherwise, on a
// real NATS, the reconcilers over the participant's connection (a
// quotabase.Client on quotabase.DefaultSubject); with embedded NATS, where
// no reconciler can be, none.
func newQuotaBases(o *Options, l *natsLink) (region.QuotaBases, error) {
	switch {
	case o.QuotaBases != nil:
		return o.QuotaBases, nil
	case o.embedded():
		return nil, nil
	}
	c, err := quotabase.NewClient(l.nc, quotabase.DefaultClientConfig())
	if err != nil {
		return nil, fmt.Errorf("participant: quota bases: %w", err)
	}
	return c, nil
}

// QuotaBases reads quota bases from the ledger: Options.QuotaBases, or a
// quotabase.Client on the participant's NATS connection; nil with embedded
// NATS.
func (p *Participant) QuotaBases() region.QuotaBases { return p.quotaBases }
