package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaplatform/quota/httplimit"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/redisstore"
)

// checkTimes counts the middleware's observations by path.
type checkTimes struct{ byPath map[region.Path]int }

func (c *checkTimes) ObserveCheck(p region.Path, d time.Duration) {
	if d > 0 {
		c.byPath[p]++
	}
}

// TestDegradedDecisionsAreFlagged cuts the link to a real Redis with a
// toxiproxy proxy: while it is down every answer decided without the store
// carries X-Ratelimit-Degraded with the plan's failure policy (a degraded
// plan's from its local bucket, a closed plan's a 429), and no answer of a
// healthy store carries it, before the cut or after the link is back.
// Config.Checks is told each decision's path.
func TestDegradedDecisionsAreFlagged(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	proxy := testserver.StartProxy(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	cfg := region.DefaultConfig()
	// Calls in flight on the cut link wait for this timeout (the test pays
	// it about twice), and a healthy call under load must never reach it:
	// 20 ms degraded healthy answers at a load average of 33.
	cfg.StoreTimeout = 500 * time.Millisecond
	cfg.BreakerCooldown = 50 * time.Millisecond
	plans := region.StaticPlans{Keys: map[string]region.Plan{
		"acct_degraded": {Name: "std", Rate: 1000, Capacity: 1000},
		"acct_closed":   {Name: "sms", Rate: 1000, Capacity: 1000, FailurePolicy: region.FailClosed},
		"acct_warmup":   {Name: "std", Rate: 1000, Capacity: 1000},
	}}
	lim, err := region.New(redisstore.New(rdb, fmt.Sprintf("mwdeg%d:", time.Now().UnixNano())), plans, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { lim.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	times := &checkTimes{byPath: map[region.Path]int{}}
	mw, err := httplimit.Middleware(httplimit.Config{Limiter: lim, Checks: times})
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	serve := func(key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/items", nil)
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	// Warm the client (its dial, the scripts' first load) off the keys
	// under test.
	for range 3 {
		if _, err := lim.Allow(ctx, "acct_warmup", 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"acct_degraded", "acct_closed"} {
		if w := serve(key); w.Code != http.StatusNoContent || w.Header().Get(httplimit.HeaderDegraded) != "" {
			t.Fatalf("%s, store healthy: %d, %s %q", key, w.Code, httplimit.HeaderDegraded, w.Header().Get(httplimit.HeaderDegraded))
		}
	}

	proxy.Down()
	// The first lease may still cover some checks: spend past it.
	flagged := map[string]int{}
	for i := 0; i < 3000 && (flagged["acct_degraded"] == 0 || flagged["acct_closed"] == 0); i++ {
		for _, tc := range []struct {
			key, policy string
			code        int
		}{
			{"acct_degraded", "degraded", http.StatusNoContent},
			{"acct_closed", "closed", http.StatusTooManyRequests},
		} {
			w := serve(tc.key)
			v := w.Header().Get(httplimit.HeaderDegraded)
			if v == "" {
				continue
			}
			if v != tc.policy || w.Code != tc.code {
				t.Fatalf("%s while the store is down: %d with %s %q, want %d with %q", tc.key, w.Code, httplimit.HeaderDegraded, v, tc.code, tc.policy)
			}
			flagged[tc.key]++
		}
	}
	if flagged["acct_degraded"] == 0 || flagged["acct_closed"] == 0 {
		t.Fatalf("flagged answers while the store was down: %v, want some for both keys", flagged)
	}
	if times.byPath[region.PathDegraded] == 0 {
		t.Fatalf("check times by path %v: no degraded decision observed", times.byPath)
	}

	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	testserver.WaitFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		for _, key := range []string{"acct_degraded", "acct_closed"} {
			if w := serve(key); w.Code != http.StatusNoContent || w.Header().Get(httplimit.HeaderDegraded) != "" {
				return fmt.Errorf("%s after the link is back: %d, %s %q", key, w.Code, httplimit.HeaderDegraded, w.Header().Get(httplimit.HeaderDegraded))
			}
		}
		return nil
	})
	if times.byPath[region.PathFast]+times.byPath[region.PathSlow] == 0 {
		t.Fatalf("check times by path %v: no healthy decision observed", times.byPath)
	}
}
