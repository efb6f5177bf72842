package region_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/store"
)

// durableLog is a DurableUsageSink that records which deltas were handed
// over durably, and fails while failing is set.
type durableLog struct {
	usageLog
	mu      sync.Mutex
	durable []region.Usage // guarded by mu: every RecordDurable batch, zero deltas included
	failing bool           // guarded by mu
}

func (d *durableLog) RecordDurable(_ context.Context, batch []region.Usage) error {
	d.Record(batch)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.durable = append(d.durable, batch...)
	if d.failing {
		return errors.New("spool full and NATS away")
	}
	return nil
}

func (d *durableLog) calls() []region.Usage {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]region.Usage(nil), d.durable...)
}

// A refund or charge is handed to a DurableUsageSink before it returns,
// not left for the next Flush; when the sink cannot make it durable, the
// call fails as unavailable (retry) and a retry, which replays, asks the
// sink again and succeeds once it can.
func TestRefundAndChargeAreDurableBeforeTheAnswer(t *testing.T) {
	sink := &durableLog{}
	f := newFixture(t, region.Plan{Rate: 10, Capacity: 100}, func(c *region.Config) { c.Usage = sink })
	ctx := context.Background()
	if d, err := f.lim.AllowRequest(ctx, "acct", 30, "r1"); err != nil || !d.Allowed {
		t.Fatalf("check: %+v %v", d, err)
	}
	if _, err := f.lim.Refund(ctx, "acct", 10, "r1"); err != nil {
		t.Fatal(err)
	}
	if got := sink.calls(); len(got) != 1 || got[0].Refunded != 10 || got[0].Key != "acct" {
		t.Fatalf("durable deltas after the refund, before any Flush: %+v, want one refund of 10", got)
	}
	if u := sink.totals()["acct"]; u.Refunded != 10 || u.Spent != 0 {
		t.Fatalf("usage before Flush %+v: want the refund alone (the check's spend waits for Flush)", u)
	}

	sink.mu.Lock()
	sink.failing = true
	sink.mu.Unlock()
	_, err := f.lim.Charge(ctx, "acct", 5, "r2")
	if !errors.Is(err, region.ErrUsageNotDurable) || !errors.Is(err, store.ErrStoreUnavailable) {
		t.Fatalf("charge with a failing durable sink: %v, want ErrUsageNotDurable and ErrStoreUnavailable", err)
	}
	// The retry replays; it confirms the usage with the sink, which fails still.
	if _, err := f.lim.Charge(ctx, "acct", 5, "r2"); !errors.Is(err, region.ErrUsageNotDurable) {
		t.Fatalf("replayed charge with a failing durable sink: %v, want ErrUsageNotDurable", err)
	}
	sink.mu.Lock()
	sink.failing = false
	sink.mu.Unlock()
	a, err := f.lim.Charge(ctx, "acct", 5, "r2")
	if err != nil || !a.Replayed {
		t.Fatalf("replayed charge once the sink is durable: %+v %v", a, err)
	}
	f.lim.Flush()
	if u := sink.totals()["acct"]; u.Charged != 5 || u.Refunded != 10 || u.Spent != 30 {
		t.Fatalf("usage %+v, want spent 30, refunded 10, charged 5 (the replays add nothing)", u)
	}
}
