package region

import (
	"testing"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/region/store"
)

// TestInProcessStoreHasNoDeadline: the Limiter tells an in-process store
// by its InProcess method, not by its type, and calls it without a
// deadline; any other store, a wrapped memstore included, gets one.
func TestInProcessStoreHasNoDeadline(t *testing.T) {
	mem := memstore.New(clock.NewManual(clock.System().Now()))
	wrapped := struct{ store.Store }{mem}
	for _, tc := range []struct {
		name string
		st   store.Store
		want bool
	}{{"memstore", mem, true}, {"wrapped", wrapped, false}} {
		lim, err := New(tc.st, StaticPlans{Default: Plan{Rate: 1, Capacity: 1}}, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		if lim.calls.inMemory != tc.want {
			t.Errorf("%s: in-process %v, want %v", tc.name, lim.calls.inMemory, tc.want)
		}
	}
}
