package region

import (
	"errors"
	"fmt"

	"github.com/quotaplatform/quota/region/store"
)

// ErrNoConcurrency: Acquire was called for a key whose plan has no
// concurrency limit (Plan.Concurrency 0), or on a store that holds no
// slots.
var ErrNoConcurrency = errors.New("no concurrency limit")

// ErrInvalidLeaseID: a lease id is empty, longer than store.MaxSlotIDLen bytes or
// not printable ASCII.
var ErrInvalidLeaseID = errors.New("invalid lease id")

// checkLeaseID reports whether id can be a lease id. The error wraps
// ErrInvalidLeaseID and names the field lease_id.
func checkLeaseID(id string) error {
	if len(id) > store.MaxSlotIDLen {
		return fmt.Errorf("%w: lease_id is %d bytes, at most %d allowed", ErrInvalidLeaseID, len(id), store.MaxSlotIDLen)
	}
	return CheckName(ErrInvalidLeaseID, "lease_id", id)
}
