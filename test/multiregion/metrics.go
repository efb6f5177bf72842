package multiregion

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// Metrics is one scrape of a /metrics endpoint in the Prometheus text
// format: series (name with its labels, as written) → value.
type Metrics map[string]float64

// Metrics scrapes node n.
func (c *Cluster) Metrics(n *Node) (Metrics, error) { return c.scrape(n.URL() + "/metrics") }

// ReconcilerMetrics scrapes the reconciler.
func (c *Cluster) ReconcilerMetrics() (Metrics, error) { return c.scrape(c.reconURL + "/metrics") }

func (c *Cluster) scrape(url string) (Metrics, error) {
	resp, err := c.client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	m := Metrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m, sc.Err()
}

// Sum adds every series of the metric name (all label sets) whose labels
// contain every given `label="value"` fragment.
func (m Metrics) Sum(name string, labels ...string) float64 {
	total := 0.0
	for series, v := range m {
		base, rest, _ := strings.Cut(series, "{")
		if base != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
				break
			}
		}
		if ok {
			total += v
		}
	}
	return total
}

// Has reports whether any series of the metric exists.
func (m Metrics) Has(name string) bool {
	for series := range m {
		if base, _, _ := strings.Cut(series, "{"); base == name {
			return true
		}
	}
	return false
}

// first returns the sum of the first of names that exists.
func (m Metrics) first(names ...string) (float64, bool) {
	for _, n := range names {
		if m.Has(n) {
			return m.Sum(n), true
		}
	}
	return 0, false
}

// Buckets returns the cumulative histogram buckets of metric name (the
// _bucket series whose labels contain every `label="value"` fragment given,
// other labels summed): upper bound → count.
func (m Metrics) Buckets(name string, labels ...string) map[float64]float64 {
	out := map[float64]float64{}
	for series, v := range m {
		base, rest, ok := strings.Cut(series, "{")
		if !ok || base != name+"_bucket" {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(rest, l)
		}
		if !match {
			continue
		}
		i := strings.Index(rest, `le="`)
		if i < 0 {
			continue
		}
		le := rest[i+4:]
		le = le[:strings.IndexByte(le, '"')]
		ub, err := strconv.ParseFloat(le, 64)
		if le == "+Inf" {
			ub, err = math.Inf(1), nil
		}
		if err != nil {
			continue
		}
		out[ub] += v
	}
	return out
}

// histogramQuantile is the q-quantile (0..1) of cumulative buckets: the
// upper bound of the first bucket holding it (a bound) and, as Prometheus'
// histogram_quantile does, a linear interpolation within that bucket (an
// estimate). It also returns the number of observations.
func histogramQuantile(q float64, buckets map[float64]float64) (bound, estimate, total float64) {
	bounds := make([]float64, 0, len(buckets))
	for ub := range buckets {
		bounds = append(bounds, ub)
	}
	sort.Float64s(bounds)
	if len(bounds) == 0 {
		return 0, 0, 0
	}
	total = buckets[bounds[len(bounds)-1]]
	if total <= 0 {
		return 0, 0, 0
	}
	lb, prev := 0.0, 0.0
	for _, ub := range bounds {
		if c := buckets[ub]; c >= q*total {
			if math.IsInf(ub, 1) {
				return ub, lb, total
			}
			frac := 1.0
			if c > prev {
				frac = (q*total - prev) / (c - prev)
			}
			return ub, lb + (ub-lb)*frac, total
		} else {
			lb, prev = ub, c
		}
	}
	return math.Inf(1), lb, total
}
