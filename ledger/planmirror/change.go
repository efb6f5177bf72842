package planmirror

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/limit"
)

// change is one mirrored entry at one bucket revision: a plan's quota
// fields or a key's plan, or the entry's deletion.
type change struct {
	kind     catalog.Kind // KindPlan or KindKey
	name     string
	revision uint64
	deleted  bool

	plan limit.Plan // KindPlan: TimeZone, AnchorDay and Quotas are mirrored
	to   string     // KindKey: the assigned plan
}

// errSkip marks an entry of a kind the mirror does not keep.
var errSkip = errors.New("not mirrored")

// decode reads a pushed bucket entry as a change. It returns errSkip for
// the kinds the mirror does not keep, and an error naming kind and
// revision (never the name) for an entry that does not decode or validate.
func decode(kve jetstream.KeyValueEntry) (change, error) {
	kind, enc, _ := strings.Cut(kve.Key(), ".")
	switch catalog.Kind(kind) {
	case catalog.KindPlan, catalog.KindKey:
	default:
		return change{}, errSkip
	}
	name, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(name) == 0 {
		return change{}, fmt.Errorf("planmirror: %s entry at revision %d: the bucket key's name is not base64", kind, kve.Revision())
	}
	c := change{kind: catalog.Kind(kind), name: string(name), revision: kve.Revision()}
	if kve.Operation() != jetstream.KeyValuePut {
		c.deleted = true // a delete or purge marker
		return c, nil
	}
	var e catalog.Entry
	if err := json.Unmarshal(kve.Value(), &e); err != nil {
		return change{}, fmt.Errorf("planmirror: %s entry at revision %d: %w", kind, kve.Revision(), err)
	}
	if e.Kind != c.kind || e.Name != c.name {
		return change{}, fmt.Errorf("planmirror: %s entry at revision %d: the value names another entry", kind, kve.Revision())
	}
	if e.Deleted { // a tombstone written by catalog.Delete
		c.deleted = true
		return c, nil
	}
	if err := c.fill(e); err != nil {
		return change{}, fmt.Errorf("planmirror: %s entry at revision %d: %w", kind, kve.Revision(), err)
	}
	return c, nil
}

// fill takes the mirrored fields of a live entry, validated as the
// catalogue validates them.
func (c *change) fill(e catalog.Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	if c.kind == catalog.KindKey {
		c.to = e.Plan
	} else {
		c.plan = e.RegionPlan()
	}
	return nil
}

// quotaJSON is a plan's quotas as quota_plans.quotas holds them, shortest
// period first: [{"period":"month","limit":1000000}].
func quotaJSON(p limit.Plan) string {
	b, _ := json.Marshal(p.QuotaList()) // never nil, so [] when none; strings and integers always encode
	return string(b)
}
