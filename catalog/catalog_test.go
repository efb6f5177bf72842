package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/limit"
)

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func start(t *testing.T, url, cache string, def limit.Plan) *catalog.Catalog {
	t.Helper()
	cfg := catalog.DefaultConfig()
	cfg.CachePath = cache
	cfg.DefaultPlan = def
	cfg.RetryInterval = 50 * time.Millisecond
	c, err := catalog.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if url != "" {
		if err := c.Start(connect(t, url)); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(c.Stop)
	return c
}

func waitSynced(t *testing.T, c *catalog.Catalog) {
	t.Helper()
	testserver.WaitFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if !c.Synced() {
			return errors.New("not synced")
		}
		return nil
	})
}

// TestPutPlanChecksRange: a plan out of limit.Plan's range is refused
// with ErrInvalidValue, naming the field, and never reaches the bucket.
func TestPutPlanChecksRange(t *testing.T) {
	ns := testserver.StartNATS(t)
	c := start(t, ns.URL, "", limit.Plan{})
	waitSynced(t, c)
	ctx := context.Background()
	cases := []struct {
		name  string
		plan  limit.Plan
		field string // "" = accepted
	}{
		{"slowest plan", limit.Plan{Rate: limit.MinRate, Capacity: 1}, ""},
		{"largest plan", limit.Plan{Rate: limit.MaxRate, Capacity: limit.MaxCapacity}, ""},
		{"zero rate", limit.Plan{Rate: 0, Capacity: 1}, "rate"},
		{"rate below the minimum", limit.Plan{Rate: 1e-9, Capacity: 1}, "rate"},
		{"rate above the maximum", limit.Plan{Rate: 1e16, Capacity: 1}, "rate"},
		{"capacity below 1", limit.Plan{Rate: 1, Capacity: 0.5}, "capacity"},
		{"capacity above the maximum", limit.Plan{Rate: 1, Capacity: 1e16}, "capacity"},
		{"every semantics field", limit.Plan{Rate: 1, Capacity: 1, FailurePolicy: limit.FailOpen, Shadow: true, Concurrency: 4}, ""},
		{"unknown failure policy", limit.Plan{Rate: 1, Capacity: 1, FailurePolicy: "fail-soft"}, "failure_policy"},
		{"unknown mode", limit.Plan{Rate: 1, Capacity: 1, Mode: "fuzzy"}, "mode"},
		{"exact plan failing open", limit.Plan{Rate: 1, Capacity: 1, Mode: limit.ModeExact, FailurePolicy: limit.FailOpen}, "failure_policy"},
		{"negative concurrency", limit.Plan{Rate: 1, Capacity: 1, Concurrency: -2}, "concurrency"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("plan-%d", i)
			_, err := c.PutPlan(ctx, "admin", name, tc.plan)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("PutPlan(%+v) = %v", tc.plan, err)
				}
				return
			}
			if !errors.Is(err, catalog.ErrInvalidValue) || !strings.Contains(err.Error(), tc.field+" must") {
				t.Fatalf("PutPlan(%+v) = %v, want ErrInvalidValue naming %s", tc.plan, err, tc.field)
			}
			if _, ok := c.PlanEntry(name); ok {
				t.Fatalf("the refused plan %s is in the catalogue", name)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	ns := testserver.StartNATS(t)
	c := start(t, ns.URL, "", limit.Plan{})
	waitSynced(t, c)
	ctx := context.Background()

	if _, _, err := c.Resolve("acct_1"); !errors.Is(err, limit.ErrUnknownPlan) {
		t.Fatalf("no default plan: err = %v, want ErrUnknownPlan", err)
	}
	if _, err := c.Assign(ctx, "admin", "acct_1", "pro"); !errors.Is(err, limit.ErrUnknownPlan) {
		t.Fatalf("assign to missing plan: err = %v", err)
	}
	mustPut := func(name string, p limit.Plan) {
		if _, err := c.PutPlan(ctx, "admin", name, p); err != nil {
			t.Fatal(err)
		}
	}
	mustPut("default", limit.Plan{Rate: 1, Capacity: 10})
	mustPut("pro", limit.Plan{Rate: 100, Capacity: 1000})
	if _, err := c.Assign(ctx, "alice", "acct:1/ü?", "pro"); !errors.Is(err, catalog.ErrInvalidName) {
		t.Fatalf("non-printable key: err = %v", err)
	}
	if _, err := c.Assign(ctx, "alice", "acct:1/*>", "pro"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutCost(ctx, "admin", "search", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutPlan(ctx, "admin", "bad", limit.Plan{Rate: 0, Capacity: 1}); !errors.Is(err, catalog.ErrInvalidValue) {
		t.Fatalf("bad plan: err = %v", err)
	}

	tests := []struct {
		key, plan string
		want      limit.Plan
	}{
		{"acct:1/*>", "pro", limit.Plan{Name: "pro", Rate: 100, Capacity: 1000}},
		{"other", "default", limit.Plan{Name: "default", Rate: 1, Capacity: 10}},
	}
	for _, tt := range tests {
		name, p, err := c.Resolve(tt.key)
		if err != nil || name != tt.plan || p != tt.want {
			t.Errorf("Resolve(%q) = %q %v %v, want %q %v", tt.key, name, p, err, tt.plan, tt.want)
		}
	}
	if cost, ok := c.Cost("search"); !ok || cost != 5 {
		t.Errorf("Cost(search) = %d %v", cost, ok)
	}
	if c.Version() == 0 {
		t.Error("version not set")
	}
	a, _ := c.Assignment("acct:1/*>")
	if a.Actor != "alice" || a.At.IsZero() {
		t.Errorf("assignment actor/time = %q %v", a.Actor, a.At)
	}
	mustPut("pro", limit.Plan{Rate: 200, Capacity: 2000})
	h, err := c.History(ctx, catalog.KindPlan, "pro")
	if err != nil || len(h) != 2 || h[0].Rate != 100 || h[1].Rate != 200 || h[1].Actor != "admin" {
		t.Fatalf("History = %+v, %v", h, err)
	}
}

func TestBuiltinDefault(t *testing.T) {
	c := start(t, "", "", limit.Plan{Rate: 5, Capacity: 50})
	name, p, err := c.Resolve("anyone")
	if err != nil || name != "default" || p.Rate != 5 {
		t.Fatalf("Resolve = %q %v %v", name, p, err)
	}
	e, ok := c.PlanEntry("default")
	if !ok || e.Actor != catalog.BuiltinActor {
		t.Fatalf("PlanEntry(default) = %+v %v", e, ok)
	}
	if _, err := c.PutPlan(context.Background(), "admin", "x", limit.Plan{Rate: 1, Capacity: 1}); !errors.Is(err, catalog.ErrUnavailable) {
		t.Fatalf("write without NATS: err = %v", err)
	}
}

// A change on one catalogue reaches another within a second, the change
// hook fires, and a catalogue started without NATS loads the cache.
func TestPushAndCache(t *testing.T) {
	ns := testserver.StartNATS(t)
	dir := t.TempDir()
	a := start(t, ns.URL, filepath.Join(dir, "a.json"), limit.Plan{})
	b := start(t, ns.URL, filepath.Join(dir, "b.json"), limit.Plan{})
	waitSynced(t, a)
	waitSynced(t, b)
	changed := make(chan struct{}, 16)
	b.OnChange(func() { changed <- struct{}{} })

	t0 := time.Now()
	if _, err := a.PutPlan(context.Background(), "admin", "gold", limit.Plan{Rate: 7, Capacity: 70}); err != nil {
		t.Fatal(err)
	}
	testserver.WaitFor(t, 2*time.Second, time.Millisecond, func() error {
		if _, ok := b.PlanEntry("gold"); !ok {
			return errors.New("gold not on b")
		}
		return nil
	})
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("change took %v to reach the other process", d)
	}
	select {
	case <-changed:
	case <-time.After(2 * time.Second):
		t.Fatal("OnChange not called")
	}

	// Restart during an outage: the cache answers.
	b.Stop()
	ns.Stop()
	c := start(t, "", filepath.Join(dir, "b.json"), limit.Plan{})
	if e, ok := c.PlanEntry("gold"); !ok || e.Rate != 7 {
		t.Fatalf("cached plan = %+v %v", e, ok)
	}
	if !c.Loaded() || c.Synced() || c.Version() != a.Version() {
		t.Fatalf("Loaded %v Synced %v Version %d (want %d)", c.Loaded(), c.Synced(), c.Version(), a.Version())
	}
}

// TestPlanSemanticsPushed: a plan's failure policy, mode, shadow flag and
// concurrency reach another process through the bucket, resolve for its
// keys, and survive the cache file.
func TestPlanSemanticsPushed(t *testing.T) {
	ns := testserver.StartNATS(t)
	dir := t.TempDir()
	a := start(t, ns.URL, "", limit.Plan{})
	b := start(t, ns.URL, filepath.Join(dir, "b.json"), limit.Plan{})
	waitSynced(t, a)
	waitSynced(t, b)
	ctx := context.Background()
	want := limit.Plan{Name: "partner", Rate: 2, Capacity: 5, Mode: limit.ModeExact, FailurePolicy: limit.FailClosed, Shadow: true, Concurrency: 3}
	if _, err := a.PutPlan(ctx, "admin", "partner", want); err != nil {
		t.Fatal(err)
	}
	v, err := a.Assign(ctx, "admin", "acct_1", "partner")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.WaitVersion(ctx, v); err != nil {
		t.Fatal(err)
	}
	if _, p, err := b.Resolve("acct_1"); err != nil || p != want {
		t.Fatalf("Resolve on the other process = %+v, %v; want %+v", p, err, want)
	}
	b.Stop()
	c := start(t, "", filepath.Join(dir, "b.json"), limit.Plan{})
	if _, p, err := c.Resolve("acct_1"); err != nil || p != want {
		t.Fatalf("Resolve from the cache = %+v, %v; want %+v", p, err, want)
	}
}

// The watch comes back after NATS restarts and picks up changes made there.
func TestReconnect(t *testing.T) {
	ns := testserver.StartNATS(t)
	a := start(t, ns.URL, "", limit.Plan{})
	b := start(t, ns.URL, "", limit.Plan{})
	waitSynced(t, a)
	waitSynced(t, b)
	ns.Restart(t)
	ctx := context.Background()
	for i := range 3 {
		testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
			_, err := a.PutPlan(ctx, "admin", fmt.Sprintf("p%d", i), limit.Plan{Rate: 1, Capacity: 1})
			return err
		})
	}
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if _, ok := b.PlanEntry("p2"); !ok {
			return errors.New("p2 not on b")
		}
		return nil
	})
}

// invRecorder records what a catalogue says went stale.
type invRecorder struct {
	mu   sync.Mutex
	all  int
	keys []string
}

func (r *invRecorder) Invalidate(key string) {
	r.mu.Lock()
	r.keys = append(r.keys, key)
	r.mu.Unlock()
}
func (r *invRecorder) InvalidateAll() { r.mu.Lock(); r.all++; r.mu.Unlock() }
func (r *invRecorder) get() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.all, append([]string(nil), r.keys...)
}

// An assignment invalidates its key, a plan every key, a weight none.
func TestSubscribe(t *testing.T) {
	ns := testserver.StartNATS(t)
	cfg := catalog.DefaultConfig()
	c, err := catalog.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rec := &invRecorder{}
	c.Subscribe(rec)
	if err := c.Start(connect(t, ns.URL)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	waitSynced(t, c)
	ctx := context.Background()
	wait := func(wantAll int, wantKeys ...string) {
		t.Helper()
		testserver.WaitFor(t, 2*time.Second, time.Millisecond, func() error {
			all, keys := rec.get()
			if all != wantAll || !slices.Equal(keys, wantKeys) {
				return fmt.Errorf("all %d keys %v, want %d %v", all, keys, wantAll, wantKeys)
			}
			return nil
		})
	}
	wait(1) // the first read of the bucket
	if _, err := c.PutPlan(ctx, "admin", "pro", limit.Plan{Rate: 1, Capacity: 1}); err != nil {
		t.Fatal(err)
	}
	wait(2)
	if _, err := c.Assign(ctx, "admin", "k1", "pro"); err != nil {
		t.Fatal(err)
	}
	wait(2, "k1")
	if _, err := c.PutCost(ctx, "admin", "search", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Assign(ctx, "admin", "k2", "pro"); err != nil {
		t.Fatal(err)
	}
	wait(2, "k1", "k2")
}

// Deletions travel like writes, keep who deleted in history, refuse a plan
// still assigned, and survive a restart from the cache file.
func TestDelete(t *testing.T) {
	ns := testserver.StartNATS(t)
	dir := t.TempDir()
	a := start(t, ns.URL, filepath.Join(dir, "a.json"), limit.Plan{Rate: 1, Capacity: 1})
	b := start(t, ns.URL, filepath.Join(dir, "b.json"), limit.Plan{Rate: 1, Capacity: 1})
	waitSynced(t, a)
	waitSynced(t, b)
	ctx := context.Background()
	for _, err := range []error{
		func() error {
			_, err := a.PutPlan(ctx, "alice", "gold", limit.Plan{Rate: 5, Capacity: 50})
			return err
		}(),
		func() error { _, err := a.Assign(ctx, "alice", "acct_1", "gold"); return err }(),
		func() error { _, err := a.PutCost(ctx, "alice", "search", 5); return err }(),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name string
		kind catalog.Kind
		key  string
		want error
		says string
	}{
		{"a plan still assigned", catalog.KindPlan, "gold", catalog.ErrInUse, `plan "gold" is assigned to 1 keys (acct_1)`},
		{"an assignment", catalog.KindKey, "acct_1", nil, ""},
		{"the same again", catalog.KindKey, "acct_1", catalog.ErrNotFound, `key "acct_1" does not exist`},
		{"the plan, now unused", catalog.KindPlan, "gold", nil, ""},
		{"the built-in default", catalog.KindPlan, catalog.DefaultPlanName, catalog.ErrNotFound, "does not exist"},
		{"an endpoint weight", catalog.KindCost, "search", nil, ""},
		{"a bad name", catalog.KindCost, "a b", catalog.ErrInvalidName, "endpoint"},
	}
	var last uint64
	for _, s := range steps {
		rev, err := a.Delete(ctx, "bob", s.kind, s.key)
		if !errors.Is(err, s.want) || (err != nil && !strings.Contains(err.Error(), s.says)) {
			t.Fatalf("%s: Delete(%s %q) = %v, want %v saying %q", s.name, s.kind, s.key, err, s.want, s.says)
		}
		last = max(last, rev)
	}
	if err := b.WaitVersion(ctx, last); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Assignment("acct_1"); ok {
		t.Error("the other process still has the assignment")
	}
	if _, ok := b.PlanEntry("gold"); ok {
		t.Error("the other process still has the plan")
	}
	if _, ok := b.Cost("search"); ok {
		t.Error("the other process still has the weight")
	}
	if name, p, err := b.Resolve("acct_1"); err != nil || name != catalog.DefaultPlanName || p.Rate != 1 {
		t.Errorf("acct_1 resolves to %q %+v %v, want the default", name, p, err)
	}
	h, err := b.History(ctx, catalog.KindPlan, "gold")
	if err != nil || len(h) != 2 || h[0].Actor != "alice" || !h[1].Deleted || h[1].Actor != "bob" {
		t.Fatalf("history of gold: %+v %v, want alice's write then bob's deletion", h, err)
	}
	// A restart from the cache file alone does not bring them back.
	b.Stop()
	c := start(t, "", filepath.Join(dir, "b.json"), limit.Plan{})
	if _, ok := c.PlanEntry("gold"); ok || c.Version() < last {
		t.Fatalf("after a restart from the cache: gold present %v, version %d (want ≥ %d)", ok, c.Version(), last)
	}
}
