package grafana

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Dashboards are the dashboard files, by name (fleet.json, billing.json).
//
//go:embed *.json
var Dashboards embed.FS

// Query is one PromQL expression and where it was found.
type Query struct {
	// Where names the file and the panel, target or rule, e.g.
	// `fleet.json: panel "Breaker state" target A`.
	Where string
	// Expr is the expression as written, Grafana variables included.
	Expr string
	// PromQL is false for a template variable's query, which is Grafana's
	// own syntax (label_values(…)) rather than PromQL.
	PromQL bool
}

// DashboardQueries returns every panel target's expression (rows' nested
// panels included) and every template variable's query of the embedded
// dashboards. A panel without targets is skipped only when it is a text or
// row panel: any other panel type must query something.
func DashboardQueries() ([]Query, error) {
	names, err := fs.Glob(Dashboards, "*.json")
	if err != nil {
		return nil, err
	}
	var out []Query
	for _, name := range names {
		b, err := Dashboards.ReadFile(name)
		if err != nil {
			return nil, err
		}
		q, err := dashboardQueries(name, b)
		if err != nil {
			return nil, err
		}
		out = append(out, q...)
	}
	return out, nil
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"` // a string, or {"query": "…"}
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"` // a collapsed row's panels
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

func dashboardQueries(name string, b []byte) ([]Query, error) {
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if d.UID == "" || d.Title == "" {
		return nil, fmt.Errorf("%s: a dashboard needs a uid and a title", name)
	}
	var out []Query
	var walk func([]panel) error
	walk = func(ps []panel) error {
		for _, p := range ps {
			if err := walk(p.Panels); err != nil {
				return err
			}
			if p.Type == "row" || p.Type == "text" {
				continue
			}
			if len(p.Targets) == 0 {
				return fmt.Errorf("%s: panel %q (%s) has no targets", name, p.Title, p.Type)
			}
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) == "" {
					return fmt.Errorf("%s: panel %q target %s has no expr", name, p.Title, t.RefID)
				}
				out = append(out, Query{Where: fmt.Sprintf("%s: panel %q target %s", name, p.Title, t.RefID), Expr: t.Expr, PromQL: true})
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q := v.Query
		if m, ok := q.(map[string]any); ok {
			q = m["query"]
		}
		s, ok := q.(string)
		if !ok || s == "" {
			return nil, fmt.Errorf("%s: template variable %s has no query", name, v.Name)
		}
		out = append(out, Query{Where: fmt.Sprintf("%s: variable %s", name, v.Name), Expr: s})
	}
	return out, nil
}

// RuleQueries returns the expression of every rule in a Prometheus rules
// file (groups[].rules[].expr), as PromQL.
func RuleQueries(file string) ([]Query, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var rf struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rf); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var out []Query
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			out = append(out, Query{Where: fmt.Sprintf("%s: group %s rule %s%s", path.Base(file), g.Name, r.Alert, r.Record), Expr: r.Expr, PromQL: true})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no rules", file)
	}
	return out, nil
}

var (
	// A metric name of this project. Label values are stripped before
	// matching, so a quoted value never counts.
	metricName = regexp.MustCompile(`\bquota_[a-z0-9_]+\b`)
	quoted     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
)

// MetricNames returns the quota_ metric names expr refers to, sorted and
// without duplicates, as written: a histogram's series keep their
// _bucket, _sum or _count suffix (see Family).
func MetricNames(expr string) []string {
	names := metricName.FindAllString(quoted.ReplaceAllString(expr, `""`), -1)
	slices.Sort(names)
	return slices.Compact(names)
}

// Family returns the metric family a series name may belong to: name
// itself, and for a name ending in _bucket, _sum or _count also the name
// without that suffix (a histogram's or summary's series).
func Family(name string) []string {
	out := []string{name}
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, s); ok {
			out = append(out, base)
		}
	}
	return out
}
