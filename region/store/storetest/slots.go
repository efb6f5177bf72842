package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// testSlots runs the SlotStore contract when the store implements it: at
// most Limit slots, a held id renewed without taking another, a released
// slot freed, an expired one forgotten, refusals.
func testSlots(t *testing.T, open Opener) {
	s, advance := open(t)
	ss, ok := s.(store.SlotStore)
	if !ok {
		t.Skipf("%T holds no slots", s)
	}
	ctx := context.Background()
	acq := func(id string) store.SlotReply {
		t.Helper()
		rep, err := ss.AcquireSlot(ctx, store.SlotRequest{Key: "k", ID: id, Limit: 2, TTL: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if r := acq("a"); !r.Acquired || r.Held != 1 || r.TTL != 300*time.Millisecond {
		t.Fatalf("first: %+v", r)
	}
	if r := acq("b"); !r.Acquired || r.Held != 2 {
		t.Fatalf("second: %+v", r)
	}
	if r := acq("c"); r.Acquired || r.Held != 2 {
		t.Fatalf("third of 2: %+v", r)
	}
	if r := acq("a"); !r.Acquired || r.Held != 2 {
		t.Fatalf("renewal: %+v", r)
	}
	if ok, err := ss.ReleaseSlot(ctx, "k", "b"); err != nil || !ok {
		t.Fatalf("release b: %v %v", ok, err)
	}
	if ok, err := ss.ReleaseSlot(ctx, "k", "b"); err != nil || ok {
		t.Fatalf("second release of b: %v %v", ok, err)
	}
	if r := acq("c"); !r.Acquired || r.Held != 2 {
		t.Fatalf("after a release: %+v", r)
	}
	advance(400 * time.Millisecond) // a and c expire
	if r := acq("d"); !r.Acquired || r.Held != 1 {
		t.Fatalf("after expiry: %+v", r)
	}
	for _, bad := range []store.SlotRequest{
		{Key: "", ID: "x", Limit: 1, TTL: time.Second},
		{Key: "k", ID: "", Limit: 1, TTL: time.Second},
		{Key: "k", ID: "a b", Limit: 1, TTL: time.Second},
		{Key: "k", ID: "x", Limit: 0, TTL: time.Second},
		{Key: "k", ID: "x", Limit: 1, TTL: 0},
	} {
		if _, err := ss.AcquireSlot(ctx, bad); !errors.Is(err, store.ErrStoreRejected) {
			t.Errorf("AcquireSlot(%+v) = %v, want ErrStoreRejected", bad, err)
		}
	}
}
