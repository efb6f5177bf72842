package multiregion

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReportWrite: the report is tables (a summary row per scenario under
// a row of targets, then each scenario's checks and notes), its plots are
// written to img/ beside it and linked, and a missed check marks its
// scenario.
func TestReportWrite(t *testing.T) {
	steady := &Figures{Scenario: "steady", Mode: ModeShort, Duration: 90 * time.Second, Decisions: 15548,
		AccuracyKey: "steady-k-0", AccuracyRatio: 0.9959, WindowLen: 60, WindowRatio: 0.9942,
		Ledger: LedgerCheck{Wired: true, ClientAllowed: 22321, LedgerSpent: 22321},
		Setup:  "3 regions × 2 processes",
		Checks: []Check{{Name: "admitted / limit", Value: "0.9959", Target: "≤ 1.01", OK: true}},
		Notes:  []string{"46788 share changes"},
		Plots:  []Plot{{Title: "steady: admitted", File: "steady-admitted.svg", SVG: []byte("<svg/>")}}}
	killed := &Figures{Scenario: "redis-killed", Mode: ModeShort, Duration: 90 * time.Second, FaultAdmitted: 1624, FaultBound: 1880,
		Ledger: LedgerCheck{Wired: true, ClientAllowed: 10, LedgerSpent: 9, Mismatches: []string{"eu-0/k"}},
		Checks: []Check{
			{Name: "degraded bound", Value: "1624 ≤ 1880", Target: "≤ bound", OK: true},
			{Name: "ledger", Value: "9 vs 10", Target: "exact"},
			{Name: "wrongly rejected", Value: "2 %", Target: "≤ 1 %", Ungated: true},
		}}
	path := filepath.Join(t.TempDir(), "out", "report.md")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := writeReport(path, []*Figures{steady, killed}, time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	report := string(b)
	for _, want := range []string{
		"# Multi-region harness: short run, 2026-12-04 15:00 UTC\n",
		"\n3 regions × 2 processes\n",
		"| target | | | ≤ 1.01 | ≤ 1.01 | ≤ bound | ≤ 1 % | 0 | < 2 (server) | | exact | |\n",
		"| steady | 90 s | 15548 | 0.996 (steady-k-0) | 0.994 (60 s) | — |",
		"| exact (22321) | ok |\n",
		"| redis-killed | 90 s |",
		"| 1624 / 1880 |",
		"| 9 vs 10 | **MISSED** |\n",
		"| wrongly rejected | 2 % | ≤ 1 % (not gated) | missed (not gated) |\n",
		"| note | 46788 share changes | | |\n",
		"[steady: admitted](img/steady-admitted.svg)",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	for i, line := range strings.Split(strings.TrimSpace(report), "\n") {
		if line != "" && !strings.HasPrefix(line, "|") && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "[") && i > 2 {
			t.Errorf("line %d is prose, not a table, heading or plot link: %q", i+1, line)
		}
	}
	if svg, err := os.ReadFile(filepath.Join(filepath.Dir(path), "img", "steady-admitted.svg")); err != nil || string(svg) != "<svg/>" {
		t.Errorf("plot: %q, %v", svg, err)
	}
}
