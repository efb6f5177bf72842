package multiregion

import (
	"math"
	"sort"
	"sync"
	"time"
)

// Cell is what the clients saw for one key, in one second of the run, in
// one region: cost allowed, rejected, allowed and rejected in degraded
// mode, and the number of decisions.
type Cell struct {
	Allowed, Rejected, Degraded int64
	DegradedRejected            int64
	Decisions                   int64
}

// CellKey addresses a Cell.
type CellKey struct {
	Key    string
	Sec    int
	Region string
}

// Failure is a failed API call.
type Failure struct {
	Region, Process string
	Checks          int
	Err             string
	// Expected: the call went to a process the scenario was killing or
	// restarting (in flight when it went down).
	Expected bool
	// At is when the call failed, from the start of the run.
	At time.Duration
}

// Record is every decision the clients saw, by key, second and region, and
// by key and process (for the ledger), with latencies and failures. It is
// safe for concurrent use.
type Record struct {
	regions    []string
	start, end time.Time

	mu        sync.Mutex
	cells     map[CellKey]*Cell           // guarded by mu
	byProcess map[string]map[string]int64 // process → key → allowed cost; guarded by mu
	degByProc map[string]map[string]int64 // process → key → degraded cost; guarded by mu
	latencies []time.Duration             // per HTTP call; guarded by mu
	perCheck  []time.Duration             // per call divided by its checks; guarded by mu
	probe     []time.Duration             // fast-path probe calls; guarded by mu
	failures  []Failure                   // guarded by mu
	failed    int                         // checks lost to failures (unexpected); guarded by mu
	expected  int                         // checks lost with a process being killed; guarded by mu
	marks     map[string]time.Duration    // guarded by mu
	lastDeg   map[string]time.Duration    // region → when its last degraded decision was seen; guarded by mu
	samples   map[string][]ShareSample    // key → samples; guarded by mu
}

// ShareSample is the regions' shares of a key at an instant of the run.
type ShareSample struct {
	At     time.Duration
	Shares map[string]float64
}

// maxLatencies bounds the latency samples kept.
const maxLatencies = 500_000

func newRecord(regions []string) *Record {
	return &Record{
		regions:   append([]string(nil), regions...),
		cells:     make(map[CellKey]*Cell),
		byProcess: make(map[string]map[string]int64),
		degByProc: make(map[string]map[string]int64),
		marks:     make(map[string]time.Duration),
		lastDeg:   make(map[string]time.Duration),
		samples:   make(map[string][]ShareSample),
	}
}

func (r *Record) decision(ch check, region, process string, allowed, degraded bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := CellKey{ch.key, ch.sec, region}
	c := r.cells[k]
	if c == nil {
		c = &Cell{}
		r.cells[k] = c
	}
	c.Decisions++
	if degraded && !r.start.IsZero() {
		r.lastDeg[region] = max(r.lastDeg[region], time.Since(r.start))
	}
	if !allowed {
		c.Rejected += ch.cost
		if degraded {
			c.DegradedRejected += ch.cost
		}
		return
	}
	c.Allowed += ch.cost
	if degraded {
		c.Degraded += ch.cost
		addTo(r.degByProc, process, ch.key, ch.cost)
	}
	m := r.byProcess[process]
	if m == nil {
		m = make(map[string]int64)
		r.byProcess[process] = m
	}
	m[ch.key] += ch.cost
}

func (r *Record) latency(d time.Duration, checks int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.latencies) < maxLatencies {
		r.latencies = append(r.latencies, d)
		r.perCheck = append(r.perCheck, d/time.Duration(max(checks, 1)))
	}
}

func (r *Record) probeLatency(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.probe) < maxLatencies {
		r.probe = append(r.probe, d)
	}
}

// ProbeLatency returns the p-quantile of the fast-path probe's calls and
// their number.
func (r *Record) ProbeLatency(p float64) (time.Duration, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return percentile(r.probe, p), len(r.probe)
}

func (r *Record) fail(region, process string, checks int, err error, expected bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if expected {
		r.expected += checks
	} else {
		r.failed += checks
	}
	if len(r.failures) < 50 {
		r.failures = append(r.failures, Failure{Region: region, Process: process, Checks: checks, Err: err.Error(), Expected: expected, At: time.Since(r.start)})
	}
}

func (r *Record) mark(name string, at time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.marks[name] = at
}

// Mark returns the instant recorded under name.
func (r *Record) Mark(name string) (time.Duration, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	d, ok := r.marks[name]
	return d, ok
}

func (r *Record) sample(key string, at time.Duration, shares map[string]float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples[key] = append(r.samples[key], ShareSample{At: at, Shares: shares})
}

// Samples returns the share samples of key.
func (r *Record) Samples(key string) []ShareSample {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ShareSample(nil), r.samples[key]...)
}

// largestShareSum is the largest sum over regions of each region's own
// share in one of samples (1 when the regions agree on their shares).
func largestShareSum(samples []ShareSample) float64 {
	worst := 0.0
	for _, sm := range samples {
		sum := 0.0
		for _, v := range sm.Shares {
			sum += v
		}
		worst = math.Max(worst, sum)
	}
	return worst
}

// Seconds is the number of whole or partial seconds the run lasted.
func (r *Record) Seconds() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k := range r.cells {
		n = max(n, k.Sec+1)
	}
	return n
}

// Series returns, for key, per second and per region ("" = all regions),
// the cell.
func (r *Record) Series(key string) map[string][]Cell {
	n := r.Seconds()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]Cell{"": make([]Cell, n)}
	for _, reg := range r.regions {
		out[reg] = make([]Cell, n)
	}
	for k, c := range r.cells {
		if k.Key != key {
			continue
		}
		for _, reg := range []string{"", k.Region} {
			s := &out[reg][k.Sec]
			s.Allowed += c.Allowed
			s.Rejected += c.Rejected
			s.Degraded += c.Degraded
			s.DegradedRejected += c.DegradedRejected
			s.Decisions += c.Decisions
		}
	}
	return out
}

// Keys returns every key seen, sorted.
func (r *Record) Keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for k := range r.cells {
		seen[k.Key] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func addTo(m map[string]map[string]int64, process, key string, v int64) {
	pm := m[process]
	if pm == nil {
		pm = make(map[string]int64)
		m[process] = pm
	}
	pm[key] += v
}

// AllowedByProcess returns process → key → allowed cost.
func (r *Record) AllowedByProcess() map[string]map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return copyNested(r.byProcess)
}

// LastDegraded returns when, since the start of the run, the clients last
// saw a decision of region flagged degraded (0: never).
func (r *Record) LastDegraded(region string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastDeg[region]
}

// DegradedByProcess returns process → key → cost allowed in degraded mode.
func (r *Record) DegradedByProcess() map[string]map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return copyNested(r.degByProc)
}

func copyNested(in map[string]map[string]int64) map[string]map[string]int64 {
	out := make(map[string]map[string]int64, len(in))
	for p, m := range in {
		cp := make(map[string]int64, len(m))
		for k, v := range m {
			cp[k] = v
		}
		out[p] = cp
	}
	return out
}

// Failures returns the failed checks (unexpected, and lost with a process
// the scenario killed) and the first failures.
func (r *Record) Failures() (failed, expected int, first []Failure) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed, r.expected, append([]Failure(nil), r.failures...)
}

// Latency returns the p-quantile of the HTTP call latency and of the
// latency per check.
func (r *Record) Latency(p float64) (perCall, perCheck time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return percentile(r.latencies, p), percentile(r.perCheck, p)
}

// Totals adds up every cell.
func (r *Record) Totals() Cell {
	r.mu.Lock()
	defer r.mu.Unlock()
	var t Cell
	for _, c := range r.cells {
		t.Allowed += c.Allowed
		t.Rejected += c.Rejected
		t.Degraded += c.Degraded
		t.Decisions += c.Decisions
	}
	return t
}
