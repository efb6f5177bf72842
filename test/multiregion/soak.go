package multiregion

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Soak is a long steady load on one limiter with Redis and the reconciler:
// Keys keys picked uniformly at random, Rate single checks a second over
// keep-alive connections, for Duration. Every Sample it reads the
// limiter's and the reconciler's /metrics and the clients' latencies of
// the last Sample; at the end it compares the ledger with what the clients
// saw allowed, key by key.
type Soak struct {
	Keys     int
	Rate     float64
	Duration time.Duration
	Sample   time.Duration
	Workers  int
}

// SoakSample is one Sample's figures.
type SoakSample struct {
	At                     time.Duration
	Checks                 int64
	P50, P99, P999         time.Duration
	HeapInuse, RSS         float64 // limiter, bytes
	Goroutines             float64
	GCPauseMax             time.Duration // the limiter's longest GC pause of the last sample (go_gc_duration_seconds max)
	GCCycles               float64       // in the sample
	LedgerPending          float64       // reconciler consumer lag, messages
	LedgerMessages         float64       // JetStream messages published by the limiter in the sample
	ReconcilerLastCommitAt time.Duration // age of the reconciler's last commit at the sample
}

// SoakResult is what a soak measured.
type SoakResult struct {
	Soak      Soak
	Samples   []SoakSample
	Allowed   map[string]int64 // by key, as the clients saw
	Checks    int64
	Errors    int64
	FirstErr  string
	LedgerLag time.Duration // from the end of the load until the ledger equalled Allowed
	Mismatch  []string      // keys whose ledger spent differs from Allowed (at most 10)
	Settled   bool
}

// RunSoak runs s against node n of c.
func (c *Cluster) RunSoak(ctx context.Context, n *Node, s Soak) *SoakResult {
	res := &SoakResult{Soak: s, Allowed: make(map[string]int64, s.Keys)}
	keys := make([]string, s.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("soak-%06d", i)
	}
	allowed := make([]atomic.Int64, s.Keys)
	var checks, errs atomic.Int64
	var firstErr atomic.Value

	var latMu sync.Mutex
	var lats []time.Duration // of the current sample

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: s.Workers, IdleConnTimeout: time.Minute}}
	defer client.CloseIdleConnections()
	lctx, stop := context.WithTimeout(ctx, s.Duration)
	defer stop()
	start := time.Now()
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) * float64(s.Workers) / s.Rate)
	for w := range s.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w)+1, 7))
			next := time.Now().Add(time.Duration(rng.Int64N(int64(interval))))
			var body bytes.Buffer
			for lctx.Err() == nil {
				if d := time.Until(next); d > 0 {
					select {
					case <-time.After(d):
					case <-lctx.Done():
						return
					}
				}
				next = next.Add(interval)
				k := rng.IntN(s.Keys)
				body.Reset()
				fmt.Fprintf(&body, `{"key":%q,"cost":1}`, keys[k])
				t0 := time.Now()
				ok, err := soakCheck(client, n.URL()+"/v1/allow", body.Bytes())
				lat := time.Since(t0)
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				checks.Add(1)
				if ok {
					allowed[k].Add(1)
				}
				latMu.Lock()
				lats = append(lats, lat)
				latMu.Unlock()
			}
		}()
	}

	tick := time.NewTicker(s.Sample)
	prev, _ := c.Metrics(n)
	var prevChecks int64
sampling:
	for {
		select {
		case <-lctx.Done():
			break sampling
		case <-tick.C:
		}
		latMu.Lock()
		cur := lats
		lats = nil
		latMu.Unlock()
		m, err := c.Metrics(n)
		if err != nil {
			continue
		}
		rm, _ := c.ReconcilerMetrics()
		total := checks.Load()
		smp := SoakSample{
			At: time.Since(start), Checks: total - prevChecks,
			P50: percentile(cur, 0.50), P99: percentile(cur, 0.99), P999: percentile(cur, 0.999),
			HeapInuse: m.Sum("go_memstats_heap_inuse_bytes"), RSS: m.Sum("process_resident_memory_bytes"),
			Goroutines:     m.Sum("go_goroutines"),
			GCPauseMax:     time.Duration(m.Sum("go_gc_duration_seconds", `quantile="1"`) * float64(time.Second)),
			GCCycles:       m.Sum("go_gc_duration_seconds_count") - prev.Sum("go_gc_duration_seconds_count"),
			LedgerMessages: m.Sum("quota_ledger_messages_published_total") - prev.Sum("quota_ledger_messages_published_total"),
		}
		if rm != nil {
			smp.LedgerPending = rm.Sum("quota_reconciler_consumer_pending")
			if lc := rm.Sum("quota_reconciler_last_commit_timestamp_seconds"); lc > 0 {
				smp.ReconcilerLastCommitAt = time.Since(time.Unix(0, int64(lc*1e9))).Round(time.Millisecond)
			}
		}
		res.Samples = append(res.Samples, smp)
		prev, prevChecks = m, total
	}
	tick.Stop()
	wg.Wait()
	loadEnd := time.Now()
	res.Checks, res.Errors = checks.Load(), errs.Load()
	if e, ok := firstErr.Load().(string); ok {
		res.FirstErr = e
	}
	for i, k := range keys {
		if a := allowed[i].Load(); a > 0 {
			res.Allowed[k] = a
		}
	}
	res.Settled, res.Mismatch = c.awaitLedger(ctx, res.Allowed)
	res.LedgerLag = time.Since(loadEnd).Round(time.Second)
	return res
}

// awaitLedger waits (until ctx ends) for the ledger's spent per key, over
// every process, to equal want, and returns whether it did and, if not, up
// to 10 keys that differ.
func (c *Cluster) awaitLedger(ctx context.Context, want map[string]int64) (bool, []string) {
	var diff []string
	for {
		led, err := c.ReadLedger(ctx)
		if err == nil {
			got := map[string]int64{}
			for _, byKey := range led {
				for k, r := range byKey {
					if strings.HasPrefix(k, "soak-") {
						got[k] += r.Spent
					}
				}
			}
			diff = diff[:0]
			for k, w := range want {
				if got[k] != w && len(diff) < 10 {
					diff = append(diff, fmt.Sprintf("%s: ledger %d, clients %d", k, got[k], w))
				}
			}
			for k, g := range got {
				if _, ok := want[k]; !ok && len(diff) < 10 {
					diff = append(diff, fmt.Sprintf("%s: ledger %d, clients 0", k, g))
				}
			}
			if len(diff) == 0 {
				return true, nil
			}
		}
		select {
		case <-ctx.Done():
			return false, diff
		case <-time.After(time.Second):
		}
	}
}

// soakCheck sends one check and reports whether it was allowed.
func soakCheck(client *http.Client, url string, body []byte) (bool, error) {
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("POST /v1/allow: %s %v %.200s", resp.Status, err, b)
	}
	var d decisionJSON
	if err := json.Unmarshal(b, &d); err != nil || d.Error != "" {
		return false, fmt.Errorf("POST /v1/allow: bad answer (%v): %.200s", err, b)
	}
	return d.Allowed, nil
}

// WriteReport writes the soak's report (Markdown) to path.
func (r *SoakResult) WriteReport(path string) error {
	var b bytes.Buffer
	s := r.Soak
	fmt.Fprintf(&b, "# Soak\n\nWritten by `make soak` (test/multiregion TestSoak) on %s: one limiter with its own Redis "+
		"and the reconciler into Postgres, %d keys picked uniformly at random, %.0f single checks a second over "+
		"HTTP/1.1 keep-alive (%d clients), for %v. The load generator shares the machine's cores.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), s.Keys, s.Rate, s.Workers, s.Duration)
	fmt.Fprintf(&b, "- checks: %d (%d errors%s)\n", r.Checks, r.Errors, errNote(r.FirstErr))
	fmt.Fprintf(&b, "- keys with allowed checks: %d\n", len(r.Allowed))
	if r.Settled {
		fmt.Fprintf(&b, "- ledger: equal to what the clients saw allowed, key by key, %v after the load ended\n", r.LedgerLag)
	} else {
		fmt.Fprintf(&b, "- ledger: **differs** from what the clients saw allowed: %s\n", strings.Join(r.Mismatch, "; "))
	}
	first, last := r.memoryDrift()
	fmt.Fprintf(&b, "- limiter heap in use, greatest sample: %.1f MiB in the first third of the run (after the first sample), %.1f MiB in the last third\n\n", first/(1<<20), last/(1<<20))
	b.WriteString("| at | checks/s | p50 | p99 | p99.9 | heap in use | RSS | goroutines | GC cycles | longest of the last 256 GC pauses | ledger messages | reconciler lag (messages) | last commit age |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, m := range r.Samples {
		fmt.Fprintf(&b, "| %v | %.0f | %v | %v | %v | %.1f MiB | %.1f MiB | %.0f | %.0f | %v | %.0f | %.0f | %v |\n",
			m.At.Round(time.Second), float64(m.Checks)/s.Sample.Seconds(), round(m.P50), round(m.P99), round(m.P999),
			m.HeapInuse/(1<<20), m.RSS/(1<<20), m.Goroutines, m.GCCycles, round(m.GCPauseMax), m.LedgerMessages,
			m.LedgerPending, m.ReconcilerLastCommitAt)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func errNote(first string) string {
	if first == "" {
		return ""
	}
	return "; first: " + first
}

func round(d time.Duration) time.Duration {
	if d > time.Millisecond {
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// memoryDrift returns the limiter's greatest heap in use over the first
// third of the samples after the first (warm-up), and over the last third.
func (r *SoakResult) memoryDrift() (first, last float64) {
	n := len(r.Samples)
	if n < 4 {
		return 0, 0
	}
	third := max(1, (n-1)/3)
	for _, m := range r.Samples[1 : 1+third] {
		first = max(first, m.HeapInuse)
	}
	for _, m := range r.Samples[n-third:] {
		last = max(last, m.HeapInuse)
	}
	return first, last
}
