package grafana

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const runbookPrefix = "https://github.com/quotaplatform/quota/blob/main/deploy/RUNBOOK.md#"

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	Annotations map[string]string `yaml:"annotations"`
}

// loadAlerts reads the alerting rules of every rules file in
// deploy/prometheus (promtool's *.test.yaml unit tests excepted).
func loadAlerts(t *testing.T) []alertRule {
	t.Helper()
	files, err := filepath.Glob("../prometheus/*.y*ml")
	if err != nil {
		t.Fatal(err)
	}
	var out []alertRule
	for _, name := range files {
		if strings.Contains(filepath.Base(name), ".test.") {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var rf struct {
			Groups []struct {
				Rules []alertRule `yaml:"rules"`
			} `yaml:"groups"`
		}
		if err := yaml.Unmarshal(b, &rf); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, g := range rf.Groups {
			out = append(out, g.Rules...)
		}
	}
	if len(out) == 0 {
		t.Fatal("no alerting rules in deploy/prometheus")
	}
	return out
}

// signalRows returns the metric names of each row of docs/operations.md's
// "Signals to watch" table (its first column).
func signalRows(t *testing.T) [][]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "### Signals to watch\n")
	if !ok {
		t.Fatal(`docs/operations.md has no "### Signals to watch" section`)
	}
	var rows [][]string
	for _, line := range strings.Split(sec, "\n") {
		if strings.HasPrefix(line, "#") {
			break
		}
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, " | ")
		rows = append(rows, MetricNames(strings.ReplaceAll(cells[0], "`", " ")))
	}
	if len(rows) < 5 {
		t.Fatalf("found %d rows in the Signals to watch table", len(rows))
	}
	return rows
}

// Every row of docs/operations.md's "Signals to watch" table has an alert on one of
// its metrics, and every alert watches some row's metrics.
func TestSignalsHaveAlerts(t *testing.T) {
	alerts := loadAlerts(t)
	rows := signalRows(t)
	watched := func(a alertRule, row []string) bool {
		for _, n := range MetricNames(a.Expr) {
			if slices.ContainsFunc(Family(n), func(f string) bool { return slices.Contains(row, f) }) {
				return true
			}
		}
		return false
	}
	for _, row := range rows {
		if !slices.ContainsFunc(alerts, func(a alertRule) bool { return watched(a, row) }) {
			t.Errorf("no alert in deploy/prometheus/quota-rules.yaml watches the Signals to watch row %v", row)
		}
	}
	for _, a := range alerts {
		if !slices.ContainsFunc(rows, func(row []string) bool { return watched(a, row) }) {
			t.Errorf("alert %s watches no metric of the Signals to watch table: add its row", a.Alert)
		}
	}
}

// Every alert has a summary and a runbook_url pointing at its own row of
// deploy/RUNBOOK.md "Alerts runbook": a table row that names the alert and
// carries the anchor <a id="lowercased name"></a>, once, and every anchor
// there is an alert's.
func TestAlertRunbooks(t *testing.T) {
	b, err := os.ReadFile("../RUNBOOK.md")
	if err != nil {
		t.Fatal(err)
	}
	_, runbook, ok := strings.Cut(string(b), "\n## Alerts runbook\n")
	if !ok {
		t.Fatal(`deploy/RUNBOOK.md has no "## Alerts runbook" section`)
	}
	if i := strings.Index(runbook, "\n## "); i >= 0 {
		runbook = runbook[:i]
	}
	anchor := regexp.MustCompile(`<a id="([^"]+)"></a>`)
	rows := map[string]string{} // anchor → its table row
	for _, line := range strings.Split(runbook, "\n") {
		for _, m := range anchor.FindAllStringSubmatch(line, -1) {
			if !strings.HasPrefix(line, "|") {
				t.Errorf("deploy/RUNBOOK.md: anchor %s is outside the table", m[1])
			}
			if _, dup := rows[m[1]]; dup {
				t.Errorf("deploy/RUNBOOK.md: anchor %s is in two rows", m[1])
			}
			rows[m[1]] = line
		}
	}
	for _, a := range loadAlerts(t) {
		if a.Alert == "" {
			continue
		}
		if a.Annotations["summary"] == "" || a.Annotations["description"] == "" {
			t.Errorf("alert %s lacks a summary or description", a.Alert)
		}
		id, ok := strings.CutPrefix(a.Annotations["runbook_url"], runbookPrefix)
		if !ok || id != strings.ToLower(a.Alert) {
			t.Errorf("alert %s: runbook_url %q, want %s%s", a.Alert, a.Annotations["runbook_url"], runbookPrefix, strings.ToLower(a.Alert))
		}
		row, ok := rows[id]
		if !ok {
			t.Errorf(`alert %s: deploy/RUNBOOK.md "Alerts runbook" has no row with <a id=%q></a>`, a.Alert, id)
		} else if !strings.Contains(row, "`"+a.Alert+"`") {
			t.Errorf("alert %s: its runbook row does not name it: %s", a.Alert, row)
		}
		delete(rows, id)
	}
	for id := range rows {
		t.Errorf(`deploy/RUNBOOK.md "Alerts runbook" has a row for %s, which is no alert`, id)
	}
}
