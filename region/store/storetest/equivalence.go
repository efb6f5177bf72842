package storetest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/period"
	"github.com/quotaplatform/quota/region/memstore"
	"github.com/quotaplatform/quota/region/store"
)

// SeedEnv names the environment variable that fixes the equivalence
// test's seed, to replay a failure: STORETEST_SEED=1234 go test ….
const SeedEnv = "STORETEST_SEED"

// equivalenceOps is how many operations one run applies.
const equivalenceOps = 400

// tokensTolerance is how far the two stores' tokens may be apart: Redis
// keeps tokens with six decimals, the in-process store in full.
const tokensTolerance = 1e-4

// testEquivalence applies one seeded random sequence of operations (leases
// with want, min, return, spread, debt, demand and grace; clock advances;
// request ids; slots; quota calls, for the contracts the store implements)
// to the store and to memstore, the reference, and asks for the same
// answers. The reference's clock is set to each reply's StoreTime before
// it answers the same call, so that a store on its own clock (Redis) is
// compared at the very instant it computed at. Quota and slot calls carry
// no store time: their counters are not refilled, and the slots live far
// longer than the test, so that no answer depends on when they run.
func testEquivalence(t *testing.T, open Opener) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(SeedEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", SeedEnv, v, err)
		}
		seed = n
	}
	s, advance := open(t)
	refClock := clock.NewManual(storeNow(t, s))
	e := &equivalence{t: t, rnd: rand.New(rand.NewPCG(seed, seed^0x5eed)), seed: seed,
		s: s, advance: advance, ref: memstore.New(refClock), refClock: refClock}
	e.setup()
	for e.op = 0; e.op < equivalenceOps; e.op++ {
		e.step()
	}
	t.Logf("seed %d: %d operations, the same answers (%s=%d replays them)", seed, equivalenceOps, SeedEnv, seed)
}

// equivalence is one run: the store, the reference, and the keys' plans.
type equivalence struct {
	t        *testing.T
	rnd      *rand.Rand
	seed     uint64
	op       int
	s        store.Store
	advance  func(time.Duration)
	ref      *memstore.Store
	refClock *clock.Manual
	keys     []planKey
	periods  []store.QuotaPeriod // a day and a month around the start
	baseAt   time.Time           // the newest quota base's AsOf so far
}

// planKey is a key and its bucket. Every bucket takes at least 10 s to
// expire (twice capacity/rate), far longer than a run's advances, so that
// no answer depends on an expiry's exact instant.
type planKey struct {
	key            string
	rate, capacity float64
	slots          int
}

func (e *equivalence) setup() {
	e.keys = []planKey{
		{"eq-a", 50.3, 300, 2},
		{"eq-b", 7.9, 45, 1},
		{"eq-c", 1.3, 7, 3},
	}
	now := e.refClock.Now() // the store's time (testEquivalence)
	cal := suiteCalendar(e.t)
	ds, de := cal.Bounds(period.Day, now)
	ms, me := cal.Bounds(period.Month, now)
	e.periods = []store.QuotaPeriod{
		{Unit: period.Day, Start: ds, End: de, Limit: 400, Share: 0.6},
		{Unit: period.Month, Start: ms, End: me, Limit: 3000, Share: 0.35},
	}
	e.baseAt = now
}

// fail reports a difference, with what replays it.
func (e *equivalence) fail(format string, args ...any) {
	e.t.Helper()
	e.t.Fatalf("seed %d (%s=%d replays it), operation %d: %s", e.seed, SeedEnv, e.seed, e.op, fmt.Sprintf(format, args...))
}

// sync sets the reference's clock to the store's.
func (e *equivalence) sync(at time.Time) { e.refClock.Set(at) }

func (e *equivalence) step() {
	k := e.keys[e.rnd.IntN(len(e.keys))]
	_, requests := e.s.(store.RequestStore)
	_, slots := e.s.(store.SlotStore)
	_, quotas := e.s.(store.QuotaStore)
	switch n := e.rnd.IntN(100); {
	case n < 12:
		e.advance(time.Duration(1+e.rnd.IntN(150)) * time.Millisecond)
	case n < 60:
		e.lease(k)
	case n < 78 && requests:
		e.request(k)
	case n < 88 && slots:
		e.slot(k)
	case n < 100 && quotas:
		e.quota(k)
	default:
		e.lease(k)
	}
}

// upTo is a random count in [0, n], 0 half the time when sparse.
func (e *equivalence) upTo(n float64, sparse bool) int64 {
	if sparse && e.rnd.IntN(2) == 0 {
		return 0
	}
	return e.rnd.Int64N(int64(n) + 1)
}

func (e *equivalence) grace() time.Duration {
	return []time.Duration{0, 0, 40 * time.Millisecond, time.Second}[e.rnd.IntN(4)]
}

func (e *equivalence) lease(k planKey) {
	capacity := k.capacity
	if e.rnd.IntN(10) == 0 {
		capacity *= 0.8 // a share change: the bucket is clamped
	}
	req := store.LeaseRequest{Key: k.key, Rate: k.rate, Capacity: capacity,
		Want: e.upTo(capacity/2, true), Return: e.upTo(capacity/4, true), Debt: e.upTo(capacity/3, true),
		Demand: e.upTo(capacity, true), Spread: []int64{1, 1, 2, 4}[e.rnd.IntN(4)], Grace: e.grace()}
	if req.Want > 0 {
		req.Min = e.rnd.Int64N(req.Want + 1)
	}
	if e.rnd.IntN(8) == 0 {
		req.Want, req.Return, req.Debt, req.Demand = 0, 0, 0, 0 // a probe
	}
	ctx := context.Background()
	got, err := e.s.Lease(ctx, req)
	if err != nil {
		e.fail("store: Lease(%+v): %v", req, err)
	}
	e.sync(got.StoreTime)
	want, err := e.ref.Lease(ctx, req)
	if err != nil {
		e.fail("memstore: Lease(%+v): %v", req, err)
	}
	if got.Granted != want.Granted || got.DemandTotal != want.DemandTotal || !tokensEqual(got.Tokens, want.Tokens) ||
		!got.StoreTime.Equal(want.StoreTime) {
		e.fail("Lease(%+v):\n  store    %+v\n  memstore %+v", req, got, want)
	}
}

func (e *equivalence) request(k planKey) {
	req := store.RequestCall{Op: store.RequestOp(1 + e.rnd.IntN(3)), Key: k.key, ID: "r" + strconv.Itoa(e.rnd.IntN(6)),
		Rate: k.rate, Capacity: k.capacity, Cost: 1 + e.upTo(k.capacity/3, false), Horizon: time.Hour,
		Grace: e.grace(), Deny: e.rnd.IntN(8) == 0}
	ctx := context.Background()
	rs := e.s.(store.RequestStore)
	got, err := rs.Request(ctx, req)
	if err != nil {
		e.fail("store: Request(%+v): %v", req, err)
	}
	e.sync(got.StoreTime)
	want, err := e.ref.Request(ctx, req)
	if err != nil {
		e.fail("memstore: Request(%+v): %v", req, err)
	}
	g, w := got, want
	g.Tokens, w.Tokens = 0, 0
	if g.StoreTime.Equal(w.StoreTime) {
		g.StoreTime, w.StoreTime = time.Time{}, time.Time{}
	}
	if g != w || !tokensEqual(got.Tokens, want.Tokens) {
		e.fail("Request(%+v):\n  store    %+v\n  memstore %+v", req, got, want)
	}
}

func (e *equivalence) slot(k planKey) {
	ctx := context.Background()
	ss := e.s.(store.SlotStore)
	id := "s" + strconv.Itoa(e.rnd.IntN(5))
	if e.rnd.IntN(3) == 0 {
		got, err := ss.ReleaseSlot(ctx, k.key, id)
		if err != nil {
			e.fail("store: ReleaseSlot(%s, %s): %v", k.key, id, err)
		}
		if want, _ := e.ref.ReleaseSlot(ctx, k.key, id); got != want {
			e.fail("ReleaseSlot(%s, %s): store %v, memstore %v", k.key, id, got, want)
		}
		return
	}
	req := store.SlotRequest{Key: k.key, ID: id, Limit: k.slots, TTL: time.Hour}
	got, err := ss.AcquireSlot(ctx, req)
	if err != nil {
		e.fail("store: AcquireSlot(%+v): %v", req, err)
	}
	if want, _ := e.ref.AcquireSlot(ctx, req); got != want {
		e.fail("AcquireSlot(%+v):\n  store    %+v\n  memstore %+v", req, got, want)
	}
}

func (e *equivalence) quota(k planKey) {
	call := store.QuotaCall{Key: k.key, Want: e.upTo(60, false), Charge: e.upTo(20, true), NeedBase: e.rnd.IntN(6) == 0}
	call.Min = e.rnd.Int64N(call.Want + 1)
	for _, p := range e.periods[:1+e.rnd.IntN(len(e.periods))] {
		p.Return = e.upTo(15, true)
		if e.rnd.IntN(6) == 0 {
			// A base from the ledger: newer than the last one, or older
			// (which a counter ignores).
			at := e.baseAt.Add(time.Duration(e.rnd.IntN(2000)-500) * time.Millisecond)
			if at.After(e.baseAt) {
				e.baseAt = at
			}
			total := e.rnd.Int64N(p.Limit * 3 / 2)
			p.Base = &store.QuotaBaseIn{Total: total, Region: e.rnd.Int64N(total + 1), AsOf: at.Truncate(time.Microsecond)}
		}
		call.Periods = append(call.Periods, p)
	}
	ctx := context.Background()
	got, err := e.s.(store.QuotaStore).LeaseQuota(ctx, call)
	if err != nil {
		e.fail("store: LeaseQuota(%s): %v", describeQuota(call), err)
	}
	want, err := e.ref.LeaseQuota(ctx, call)
	if err != nil {
		e.fail("memstore: LeaseQuota(%s): %v", describeQuota(call), err)
	}
	same := got.Granted == want.Granted
	for i := range got.Counters {
		g, w := got.Counters[i], want.Counters[i]
		same = same && g.Used == w.Used && g.Allowance == w.Allowance && g.BaseAt.Equal(w.BaseAt)
	}
	if !same {
		e.fail("LeaseQuota(%s):\n  store    %+v\n  memstore %+v", describeQuota(call), got, want)
	}
}

func describeQuota(c store.QuotaCall) string {
	var b strings.Builder
	fmt.Fprintf(&b, "key %s want %d min %d charge %d needBase %v", c.Key, c.Want, c.Min, c.Charge, c.NeedBase)
	for _, p := range c.Periods {
		fmt.Fprintf(&b, "; %s limit %d share %v return %d", p.Unit, p.Limit, p.Share, p.Return)
		if p.Base != nil {
			fmt.Fprintf(&b, " base %+v", *p.Base)
		}
	}
	return b.String()
}

func tokensEqual(a, b float64) bool { return math.Abs(a-b) <= tokensTolerance }
