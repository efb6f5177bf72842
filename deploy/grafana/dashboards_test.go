package grafana

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// promtool returns the path of promtool, failing the test (not skipping it)
// when it is missing: .ci/run installs it before make test.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found in PATH: install the Debian package prometheus (apt-get install -y prometheus; .ci/run does)")
	}
	return p
}

// grafanaVars replaces Grafana's variables by values PromQL accepts where
// the dashboards use them: the interval ones in range selectors, the
// template variables inside label matchers' quoted values.
func grafanaVars(expr string) string {
	for v, d := range map[string]string{"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"} {
		expr = strings.ReplaceAll(expr, v, d)
	}
	return regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`).ReplaceAllString(expr, "x")
}

// checkPromQL writes exprs as recording rules into a rules file and has
// promtool check it. It returns promtool's complaint, rule names mapped
// back to where the expressions came from.
func checkPromQL(t *testing.T, qs []Query) error {
	t.Helper()
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboards\n    rules:\n")
	for i, q := range qs {
		fmt.Fprintf(&b, "      - record: dashboard_expr_%d\n        expr: %q\n", i, grafanaVars(q.Expr))
	}
	file := filepath.Join(t.TempDir(), "dashboards.rules.yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool(t), "check", "rules", file).CombinedOutput()
	if err == nil {
		return nil
	}
	msg := string(out)
	for i := len(qs) - 1; i >= 0; i-- { // longest names first: _12 before _1
		msg = strings.ReplaceAll(msg, fmt.Sprintf("dashboard_expr_%d", i), qs[i].Where)
	}
	return fmt.Errorf("promtool check rules: %v\n%s", err, msg)
}

// Every panel target of every dashboard parses as PromQL.
func TestDashboardQueriesParse(t *testing.T) {
	qs, err := DashboardQueries()
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	var promql []Query
	for _, q := range qs {
		per[strings.SplitN(q.Where, ":", 2)[0]]++
		if !q.PromQL {
			continue
		}
		if len(MetricNames(q.Expr)) == 0 {
			t.Errorf("%s names no quota_ metric: %s", q.Where, q.Expr)
		}
		promql = append(promql, q)
	}
	for _, f := range []string{"fleet.json", "billing.json"} {
		if per[f] < 10 {
			t.Errorf("%s: %d queries, want at least 10 (is it embedded?)", f, per[f])
		}
	}
	if err := checkPromQL(t, promql); err != nil {
		t.Fatal(err)
	}
}

// The check above can fail: promtool refuses an unbalanced expression, and
// a Grafana variable left outside a label value.
func TestCheckPromQLRefuses(t *testing.T) {
	for _, expr := range []string{
		`sum by (path) (rate(quota_check_duration_seconds_count[$__rate_interval])`,
		`rate(quota_decisions_total[$window])`,
	} {
		if err := checkPromQL(t, []Query{{Where: "bad", Expr: expr, PromQL: true}}); err == nil || !strings.Contains(err.Error(), "bad") {
			t.Errorf("promtool accepted %q (err %v)", expr, err)
		}
	}
}

func TestMetricNames(t *testing.T) {
	got := MetricNames(`histogram_quantile(0.99, sum by (le) (rate(quota_check_duration_seconds_bucket{path="quota_not_a_metric"}[5m])))
		/ on () quota_decisions_total + quota_decisions_total`)
	if want := []string{"quota_check_duration_seconds_bucket", "quota_decisions_total"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("MetricNames = %v, want %v", got, want)
	}
	if got := Family("quota_x_bucket"); fmt.Sprint(got) != "[quota_x_bucket quota_x]" {
		t.Errorf("Family = %v", got)
	}
}
