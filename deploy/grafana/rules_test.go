package grafana

import (
	"os"
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

func loadAlerts(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile("../prometheus/quota-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rf struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatal(err)
	}
	var out []alertRule
	for _, g := range rf.Groups {
		out = append(out, g.Rules...)
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

// Every alert has a summary and a runbook_url pointing at its own section
// of deploy/RUNBOOK.md "Alerts runbook", and that section exists.
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
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^### (\S+)\s*$`).FindAllStringSubmatch(runbook, -1) {
		anchors[strings.ToLower(m[1])] = true
	}
	alerts := loadAlerts(t)
	for _, a := range alerts {
		if a.Alert == "" {
			continue
		}
		if a.Annotations["summary"] == "" || a.Annotations["description"] == "" {
			t.Errorf("alert %s lacks a summary or description", a.Alert)
		}
		anchor, ok := strings.CutPrefix(a.Annotations["runbook_url"], runbookPrefix)
		if !ok || anchor != strings.ToLower(a.Alert) {
			t.Errorf("alert %s: runbook_url %q, want %s%s", a.Alert, a.Annotations["runbook_url"], runbookPrefix, strings.ToLower(a.Alert))
		}
		if !anchors[anchor] {
			t.Errorf("alert %s: deploy/RUNBOOK.md \"Alerts runbook\" has no section ### %s", a.Alert, a.Alert)
		}
		delete(anchors, anchor)
	}
	for a := range anchors {
		t.Errorf("deploy/RUNBOOK.md \"Alerts runbook\" has a section for %s, which is no alert", a)
	}
}
