package grafana

import (
	"bufio"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// MonitoredNames returns every quota_ metric name the embedded dashboards
// and the rules file at rulesFile refer to, each with where it is used.
func MonitoredNames(rulesFile string) (map[string][]string, error) {
	qs, err := DashboardQueries()
	if err != nil {
		return nil, err
	}
	rs, err := RuleQueries(rulesFile)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, q := range append(qs, rs...) {
		for _, n := range MetricNames(q.Expr) {
			out[n] = append(out[n], q.Where)
		}
	}
	return out, nil
}

// Exporter is one daemon's view of its metrics: Scrape is the text its
// /metrics served, Registry the registry behind it.
type Exporter struct {
	Scrape   string
	Registry prometheus.Registerer
}

// Lookup says how name is exported: "scrape" when /metrics carries its
// HELP line (for a histogram's _bucket, _sum or _count series: the family's
// HELP, typed histogram or summary); "registry" when /metrics does not
// (a vector with no series yet) but a registered collector describes it; ""
// when neither.
func (e Exporter) Lookup(name string) string {
	help, typ := e.families()
	for i, f := range Family(name) {
		if help[f] && (i == 0 || typ[f] == "histogram" || typ[f] == "summary") {
			return "scrape"
		}
	}
	if e.registered(name) {
		return "registry"
	}
	return ""
}

func (e Exporter) families() (help map[string]bool, typ map[string]string) {
	help, typ = map[string]bool{}, map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(e.Scrape))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && f[0] == "#" && f[1] == "HELP" {
			help[f[2]] = true
		}
		if len(f) >= 4 && f[0] == "#" && f[1] == "TYPE" {
			typ[f[2]] = f[3]
		}
	}
	return help, typ
}

// registered reports whether the registry already holds a collector
// describing name: a registry refuses a second descriptor of a name it
// has. The probe is first registered into an empty registry, so that a
// refusal for any other reason (an invalid name) does not count.
func (e Exporter) registered(name string) bool {
	if e.Registry == nil {
		return false
	}
	p := probe{prometheus.NewDesc(name, "probe of an existing metric name", nil, nil)}
	if err := prometheus.NewRegistry().Register(p); err != nil {
		return false
	}
	if err := e.Registry.Register(p); err != nil {
		return true
	}
	e.Registry.Unregister(p)
	return false
}

type probe struct{ d *prometheus.Desc }

func (p probe) Describe(ch chan<- *prometheus.Desc) { ch <- p.d }
func (p probe) Collect(chan<- prometheus.Metric)    {}

// Missing checks the names (from MonitoredNames) that keep says belong to
// this exporter, and returns one line per name it does not export, naming
// where the name is used. byRegistry lists the names found only in the
// registry (vectors without series when scraped).
func (e Exporter) Missing(names map[string][]string, keep func(string) bool) (missing, byRegistry []string) {
	for _, n := range slices.Sorted(maps.Keys(names)) {
		if !keep(n) {
			continue
		}
		switch e.Lookup(n) {
		case "scrape":
		case "registry":
			byRegistry = append(byRegistry, n)
		default:
			missing = append(missing, fmt.Sprintf("%s (used by %s)", n, strings.Join(names[n], "; ")))
		}
	}
	return missing, byRegistry
}
