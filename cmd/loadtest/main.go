// Command loadtest drives a regional-limiter's check API over loopback HTTP
// with keep-alive connections and reports decisions per second and request
// latency (p50, p99, p99.9) for single checks (POST /v1/allow) and batches
// (POST /v1/allow/batch).
//
// Each phase runs for -duration, closed-loop (as fast as -concurrency
// workers go) unless -rate sets a target in decisions per second, in which
// case each worker sends on a fixed schedule (open loop) and the achieved
// rate is reported next to the latency. -half adds, after each full-speed
// phase, a paced phase at half the rate it reached. Latency is per request,
// from send to the end of the answer.
//
//	go run ./cmd/loadtest -url http://127.0.0.1:8080 -duration 5s -half
//
// Against a daemon started with --check-token, pass one with -check-token.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quotaplatform/quota/internal/baseline"
)

type config struct {
	url         string
	duration    time.Duration
	concurrency int
	batch       int
	keys        int
	mode        string
	rate        float64
	half        bool
	adminToken  string
	checkToken  string
	planRate    float64
	planCap     float64
	wait        time.Duration
	serverPID   int
	grpcAddr    string
	domain      string
	descKey     string
}

func main() {
	var c config
	flag.StringVar(&c.url, "url", "http://127.0.0.1:8080", "daemon base URL")
	flag.DurationVar(&c.duration, "duration", 5*time.Second, "length of each phase")
	flag.IntVar(&c.concurrency, "concurrency", 32, "concurrent workers (one keep-alive connection each)")
	flag.IntVar(&c.batch, "batch", 100, "checks per batch request")
	flag.IntVar(&c.keys, "keys", 10000, "distinct keys, picked uniformly at random")
	flag.StringVar(&c.mode, "mode", "both", "single, batch, both, or grpc (Envoy's rate limit service on -grpc-addr)")
	flag.StringVar(&c.grpcAddr, "grpc-addr", "127.0.0.1:8081", "the daemon's --grpc-listen address, for -mode grpc")
	flag.StringVar(&c.domain, "domain", "loadtest", "rate limit domain of -mode grpc (must be in the daemon's --rls-config)")
	flag.StringVar(&c.descKey, "descriptor-key", "user", "descriptor key of -mode grpc; each request carries one entry of it with one of -keys values")
	flag.Float64Var(&c.rate, "rate", 0, "target decisions per second (0: as fast as possible)")
	flag.BoolVar(&c.half, "half", false, "after each full-speed phase, run one at half the rate reached")
	flag.StringVar(&c.adminToken, "admin-token", "", "when set, first PUT the `default` plan to -plan-rate/-plan-capacity so that most checks are allowed")
	flag.StringVar(&c.checkToken, "check-token", "", "bearer token sent with every check, for a daemon started with --check-token")
	flag.Float64Var(&c.planRate, "plan-rate", 1e6, "rate of the default plan set with -admin-token")
	flag.Float64Var(&c.planCap, "plan-capacity", 1e6, "capacity of the default plan set with -admin-token")
	flag.DurationVar(&c.wait, "wait", 10*time.Second, "wait this long for the daemon's /readyz before starting")
	flag.IntVar(&c.serverPID, "server-pid", 0, "when set, report the daemon's CPU time per decision, read from /proc/<pid>/stat")
	bare := flag.String("serve-bare", "", "instead of loading, serve the baseline on this address until killed: a bare net/http handler of POST /v1/allow that decodes the same JSON with encoding/json and answers a fixed decision (and GET /readyz)")
	flag.Parse()
	if *bare != "" {
		fmt.Fprintln(os.Stderr, "loadtest: bare baseline on", *bare)
		if err := http.ListenAndServe(*bare, baseline.CheckHandler()); err != nil {
			fmt.Fprintln(os.Stderr, "loadtest:", err)
			os.Exit(1)
		}
		return
	}
	// The generator shares the CPUs with the daemon it measures: collect
	// garbage less often so that it takes less of them.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if err := run(c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

func run(c config, out io.Writer) error {
	if c.concurrency < 1 || c.batch < 1 || c.keys < 1 || c.duration <= 0 {
		return errors.New("-concurrency, -batch, -keys and -duration must be positive")
	}
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:        c.concurrency,
			MaxIdleConnsPerHost: c.concurrency,
			MaxConnsPerHost:     c.concurrency,
			DisableCompression:  true,
			IdleConnTimeout:     time.Minute,
		},
	}
	if err := waitReady(client, c.url, c.wait); err != nil {
		return err
	}
	if c.adminToken != "" {
		body := fmt.Sprintf(`{"rate":%g,"capacity":%g}`, c.planRate, c.planCap)
		req, _ := http.NewRequest("PUT", c.url+"/v1/limits/default", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+c.adminToken)
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("set default plan: %w", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			return fmt.Errorf("set default plan: status %d", resp.StatusCode)
		}
	}
	var modes []int // batch size per phase; 0 = single
	switch c.mode {
	case "grpc":
		return runGRPC(client, c, out)
	case "single":
		modes = []int{0}
	case "batch":
		modes = []int{c.batch}
	case "both":
		modes = []int{0, c.batch}
	default:
		return fmt.Errorf("-mode %q: want single, batch, both or grpc", c.mode)
	}
	printHeader(out, c.url, c)
	for _, b := range modes {
		name := "single"
		if b > 0 {
			name = "batch(" + strconv.Itoa(b) + ")"
		}
		per, check := httpChecker(client, c, b)
		r := measured(client, c, per, c.rate, check)
		r.print(out, name)
		if c.half && c.rate == 0 {
			h := measured(client, c, per, r.decisionsPerSec()/2, check)
			h.print(out, name+" @50%")
		}
	}
	return nil
}

func printHeader(out io.Writer, target string, c config) {
	fmt.Fprintf(out, "target %s, %d workers, %d keys, %v per phase\n", target, c.concurrency, c.keys, c.duration)
	fmt.Fprintf(out, "%-14s %12s %12s %10s %10s %10s %9s %8s %12s %14s %14s %14s\n", "phase", "decisions/s", "requests/s", "p50", "p99", "p99.9", "allowed", "errors", "server-cpu", "store-calls", "server-alloc", "ledger-msgs")
}

// checker sends worker w's next request and returns how many of its
// decisions were allowed. Each worker calls it from its own goroutine.
type checker func(w int, rng *rand.Rand) (allowed int64, err error)

// httpChecker sends single checks (batch 0) or batches of checks to the
// check API; per is the decisions per request.
func httpChecker(client *http.Client, c config, batch int) (per int64, check checker) {
	per = 1
	path := c.url + "/v1/allow"
	if batch > 0 {
		per, path = int64(batch), c.url+"/v1/allow/batch"
	}
	bodies := make([]bytes.Buffer, c.concurrency)
	answers := make([]bytes.Buffer, c.concurrency)
	return per, func(w int, rng *rand.Rand) (int64, error) {
		body := &bodies[w]
		body.Reset()
		writeBody(body, rng, c.keys, batch)
		return send(client, path, c.checkToken, body.Bytes(), &answers[w])
	}
}

// counters the loadtest reads from the daemon's /metrics around a phase.
const (
	storeCallsMetric   = "quota_store_calls_total"
	allocBytesMetric   = "go_memstats_alloc_bytes_total"
	ledgerMsgsMetric   = "quota_ledger_messages_published_total"
	ledgerReportMetric = "quota_ledger_reports_published_total"
)

// measured runs a phase and reads the daemon's CPU time and counters
// around it.
func measured(client *http.Client, c config, per int64, rate float64, check checker) *result {
	names := []string{storeCallsMetric, allocBytesMetric, ledgerMsgsMetric, ledgerReportMetric}
	cpu0, cpuErr := processCPU(c.serverPID)
	before := map[string]float64{}
	for _, n := range names {
		if v, err := scrapeCounter(client, c.url, n); err == nil {
			before[n] = v
		}
	}
	r := phase(c, per, rate, check)
	r.growth = map[string]float64{}
	for _, n := range names {
		if v0, ok := before[n]; ok {
			if v1, err := scrapeCounter(client, c.url, n); err == nil {
				r.growth[n] = v1 - v0
			}
		}
	}
	if cpu1, err := processCPU(c.serverPID); c.serverPID != 0 && cpuErr == nil && err == nil {
		r.serverCPU = cpu1 - cpu0
	}
	return r
}

type result struct {
	serverCPU time.Duration // the daemon's user+system CPU during the phase
	// growth of the daemon's counters during the phase, by name (missing
	// when a scrape failed): store calls, allocated bytes, ledger messages
	// and reports published.
	growth    map[string]float64
	elapsed   time.Duration
	decisions int64
	requests  int64
	allowed   int64
	errors    int64
	lats      []time.Duration
	firstErr  error
}

// perDecision formats a counter's growth per decision, "-" when unknown.
func (r *result) perDecision(name, format string) string {
	v, ok := r.growth[name]
	if !ok || r.decisions == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v/float64(r.decisions))
}

func (r *result) decisionsPerSec() float64 { return float64(r.decisions) / r.elapsed.Seconds() }

func (r *result) print(out io.Writer, name string) {
	slices.Sort(r.lats)
	pct := func(p float64) time.Duration {
		if len(r.lats) == 0 {
			return 0
		}
		return r.lats[min(len(r.lats)-1, int(p*float64(len(r.lats))))]
	}
	allowed := 0.0
	if r.decisions > 0 {
		allowed = 100 * float64(r.allowed) / float64(r.decisions)
	}
	cpu := "-"
	if r.serverCPU > 0 && r.decisions > 0 {
		cpu = fmt.Sprintf("%.1fµs/dec", float64(r.serverCPU.Microseconds())/float64(r.decisions))
	}
	fmt.Fprintf(out, "%-14s %12.0f %12.0f %10s %10s %10s %8.1f%% %8d %12s %14s %14s %14s\n", name, r.decisionsPerSec(),
		float64(r.requests)/r.elapsed.Seconds(), round(pct(0.50)), round(pct(0.99)), round(pct(0.999)), allowed, r.errors, cpu,
		r.perDecision(storeCallsMetric, "%.4f/dec"), r.perDecision(allocBytesMetric, "%.0fB/dec"), r.perDecision(ledgerMsgsMetric, "%.5f/dec"))
	if r.firstErr != nil {
		fmt.Fprintf(out, "  first error: %v\n", r.firstErr)
	}
}

func round(d time.Duration) time.Duration {
	if d > time.Millisecond {
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// phase runs the workers for c.duration, each sending requests of per
// decisions with check. rate > 0 paces the sends (decisions per second,
// over all workers).
func phase(c config, per int64, rate float64, check checker) *result {
	ctx, cancel := context.WithTimeout(context.Background(), c.duration)
	defer cancel()
	var interval time.Duration // between one worker's requests
	if rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(per) * float64(c.concurrency) / rate)
	}
	results := make([]result, c.concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range c.concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[w]
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			r.lats = make([]time.Duration, 0, 1<<14)
			next := start.Add(time.Duration(rng.Int64N(int64(max(interval, 1)))))
			for ctx.Err() == nil {
				sent := time.Now()
				if interval > 0 {
					// Paced: wait for this worker's next slot (pacing the
					// load, not synchronisation). Latency counts from the
					// actual send; a worker that falls behind its schedule
					// shows up as an achieved rate below the target.
					if d := time.Until(next); d > 0 {
						time.Sleep(d)
					}
					next = next.Add(interval)
					if late := time.Since(next); late > time.Second {
						next = time.Now() // do not burst to catch up after a stall
					}
					sent = time.Now()
				}
				if ctx.Err() != nil {
					break
				}
				allowed, err := check(w, rng)
				lat := time.Since(sent)
				r.requests++
				if err != nil {
					r.errors++
					if r.firstErr == nil {
						r.firstErr = err
					}
					continue
				}
				r.decisions += per
				r.allowed += allowed
				r.lats = append(r.lats, lat)
			}
		}()
	}
	wg.Wait()
	total := &result{elapsed: time.Since(start)}
	for i := range results {
		r := &results[i]
		total.decisions += r.decisions
		total.requests += r.requests
		total.allowed += r.allowed
		total.errors += r.errors
		total.lats = append(total.lats, r.lats...)
		if total.firstErr == nil {
			total.firstErr = r.firstErr
		}
	}
	return total
}

func writeBody(b *bytes.Buffer, rng *rand.Rand, keys, batch int) {
	one := func() {
		b.WriteString(`{"key":"lt_`)
		b.WriteString(strconv.Itoa(rng.IntN(keys)))
		b.WriteString(`","cost":1}`)
	}
	if batch == 0 {
		one()
		return
	}
	b.WriteString(`{"checks":[`)
	for i := range batch {
		if i > 0 {
			b.WriteByte(',')
		}
		one()
	}
	b.WriteString(`]}`)
}

var allowedTrue = []byte(`"allowed":true`)

// send posts body, with "Authorization: Bearer <token>" unless token is
// "", and returns how many checks were allowed. answer is reused for the
// response body.
func send(client *http.Client, url, token string, body []byte, answer *bytes.Buffer) (int64, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	answer.Reset()
	if _, err := answer.ReadFrom(resp.Body); err != nil {
		return 0, err
	}
	b := answer.Bytes()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return int64(bytes.Count(b, allowedTrue)), nil
}

// waitReady polls url/readyz until it answers 200 or timeout passes.
func waitReady(client *http.Client, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := client.Get(url + "/readyz")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("daemon at %s not ready within %v: %w", url, timeout, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a process we do not own, with a deadline
	}
}
