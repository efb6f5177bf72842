package region_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/region/store"
)

// TestStoreTakesEveryKey: the store contract accepts every key CheckKey
// does, up to store.MaxKeyLen bytes, and refuses a longer one, so that the
// two rules (region's and the contract's, which cannot import region)
// agree.
func TestStoreTakesEveryKey(t *testing.T) {
	s := memstore.New(nil)
	now := time.Now()
	call := func(key string) error {
		_, err := s.LeaseQuota(context.Background(), store.QuotaCall{Key: key, Want: 1, Periods: []store.QuotaPeriod{
			{Unit: period.Hour, Start: now, End: now.Add(time.Hour), Limit: 1, Share: 1}}})
		return err
	}
	longest := strings.Repeat("k", store.MaxKeyLen)
	if err := region.CheckKey(longest); err != nil {
		t.Fatal(err)
	}
	if err := call(longest); err != nil {
		t.Fatalf("a key of MaxKeyLen bytes: %v", err)
	}
	if err := call(longest + "k"); !errors.Is(err, store.ErrStoreRejected) {
		t.Fatalf("a key of MaxKeyLen+1 bytes: %v, want ErrStoreRejected", err)
	}
}
