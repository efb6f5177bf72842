package multiregion

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/template"
	"time"
)

// reports collects the figures of the scenarios run by this test binary,
// in the order they finished, for the report written by TestMain. It holds
// results only, never cluster state.
var reports struct {
	mu      sync.Mutex
	figures []*Figures
}

// addReport keeps f for the report.
func addReport(f *Figures) {
	reports.mu.Lock()
	defer reports.mu.Unlock()
	reports.figures = append(reports.figures, f)
}

// writeReportFromEnv writes the report to QUOTA_MULTIREGION_REPORT (a path,
// relative to the module root when not absolute; the Makefile names one
// under the untracked out/), and the plots to img/ next to it. Nothing is
// written when the variable is empty or no scenario ran.
func writeReportFromEnv() error {
	path := os.Getenv("QUOTA_MULTIREGION_REPORT")
	reports.mu.Lock()
	figs := append([]*Figures(nil), reports.figures...)
	reports.mu.Unlock()
	if path == "" || len(figs) == 0 {
		return nil
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(moduleRoot(), path)
	}
	return writeReport(path, figs, time.Now().UTC())
}

// writeReport writes the figures' report to path, and their plots to img/
// next to it.
func writeReport(path string, figs []*Figures, at time.Time) error {
	img := filepath.Join(filepath.Dir(path), "img")
	if err := os.MkdirAll(img, 0o755); err != nil {
		return fmt.Errorf("report plots: %w", err)
	}
	for _, f := range figs {
		for _, p := range f.Plots {
			if err := os.WriteFile(filepath.Join(img, p.File), p.SVG, 0o644); err != nil {
				return fmt.Errorf("report plot %s: %w", p.File, err)
			}
		}
	}
	var b bytes.Buffer
	if err := reportTmpl.Execute(&b, reportData{Figures: figs, At: at, Mode: figs[0].Mode}); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

type reportData struct {
	Figures []*Figures
	At      time.Time
	Mode    Mode
}

var reportFuncs = template.FuncMap{
	"ms": func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) },
	"f2": func(x float64) string { return fmt.Sprintf("%.2f", x) },
	"f3": func(x float64) string { return fmt.Sprintf("%.3f", x) },
	"f0": func(x float64) string { return fmt.Sprintf("%.0f", x) },
	"okmark": func(ok bool) string {
		if ok {
			return "ok"
		}
		return "**MISSED**"
	},
	"checkmark": func(c Check) string {
		switch {
		case c.OK:
			return "ok"
		case c.Ungated:
			return "missed (not gated)"
		}
		return "**MISSED**"
	},
	"ledger": func(l LedgerCheck) string {
		switch {
		case !l.Wired:
			return "not wired"
		case l.Exact():
			return fmt.Sprintf("exact (%d)", l.LedgerSpent)
		}
		return fmt.Sprintf("%d vs %d", l.LedgerSpent, l.ClientAllowed)
	},
	"secs": func(d time.Duration) string { return fmt.Sprintf("%.0f s", d.Seconds()) },
	"join": strings.Join,
}

// reportTmpl is the report: one summary row per scenario, then each
// scenario's checks and notes. How each figure is computed is in the
// package's README, not repeated here.
var reportTmpl = template.Must(template.New("report").Funcs(reportFuncs).Parse(`# Multi-region harness: {{.Mode}} run, {{.At.Format "2006-01-02 15:04 UTC"}}
{{with (index .Figures 0).Setup}}
{{.}}
{{end}}
| scenario | run | decisions | worst key / limit | worst window | fault admitted / bound | wrongly rejected | failed calls | fast p99 server / client (ms) | store calls / decision | ledger = clients | result |
|---|---|---|---|---|---|---|---|---|---|---|---|
| target | | | ≤ 1.01 | ≤ 1.01 | ≤ bound | ≤ 1 % | 0 | < 2 (server) | | exact | |
{{range .Figures}}| {{.Scenario}} | {{secs .Duration}} | {{.Decisions}} | {{f3 .AccuracyRatio}} ({{.AccuracyKey}}) | {{f3 .WindowRatio}} ({{.WindowLen}} s) | {{if gt .FaultBound 0.0}}{{f0 .FaultAdmitted}} / {{f0 .FaultBound}}{{else}}—{{end}} | {{printf "%.2f" .WrongRejectPct}} % of {{.UnderDemand}} | {{.Failed}}{{if .LostInCrash}} (+{{.LostInCrash}} to the killed process){{end}} | {{ms .ServerFastP99}} / {{ms .FastP99}} | {{f3 .StoreCallsPerDec}} | {{ledger .Ledger}} | {{$ok := true}}{{range .Checks}}{{if and (not .OK) (not .Ungated)}}{{$ok = false}}{{end}}{{end}}{{okmark $ok}} |
{{end}}{{range .Figures}}
## {{.Scenario}}

| check | value | target | |
|---|---|---|---|
{{range .Checks}}| {{.Name}} | {{.Value}} | {{.Target}}{{if .Ungated}} (not gated){{end}} | {{checkmark .}} |
{{end}}{{range .Notes}}| note | {{.}} | | |
{{end}}{{with .Plots}}
{{range .}}[{{.Title}}](img/{{.File}}) {{end}}
{{end}}{{end}}`))

// svgSeries is one line of a plot.
type svgSeries struct {
	Name   string
	Color  string
	Dashed bool
	Points []float64 // one value per x step
}

// svgPlot renders lines over x = 0..n-1 seconds, with optional shaded
// bands (faults).
func svgPlot(title, yLabel string, series []svgSeries, bands [][2]float64) []byte {
	const W, H, L, R, T, B = 700.0, 260.0, 56.0, 140.0, 28.0, 34.0
	n, ymax := 0, 0.0
	for _, s := range series {
		n = max(n, len(s.Points))
		for _, v := range s.Points {
			ymax = math.Max(ymax, v)
		}
	}
	if n < 2 {
		n = 2
	}
	if ymax <= 0 {
		ymax = 1
	}
	ymax = niceCeil(ymax * 1.05)
	x := func(i float64) float64 { return L + i*(W-L-R)/float64(n-1) }
	y := func(v float64) float64 { return T + (1-v/ymax)*(H-T-B) }
	type line struct {
		Name, Color, Points, Dash string
		LY                        float64
	}
	type band struct{ X, W float64 }
	type tick struct {
		Pos   float64
		Label string
	}
	var d struct {
		W, H, L, R, T, B, PW, PH, BY float64
		XR, XM, YM, LX1, LX2, LX3    float64
		Title, YLabel                string
		Lines                        []line
		Bands                        []band
		XTicks, YTicks               []tick
	}
	d.W, d.H, d.L, d.R, d.T, d.B = W, H, L, R, T, B
	d.PW, d.PH, d.BY = W-L-R, H-T-B, H-B
	d.XR, d.XM, d.YM = W-R, L+(W-L-R)/2, T+(H-T-B)/2
	d.LX1, d.LX2, d.LX3 = W-R+8, W-R+24, W-R+28
	d.Title, d.YLabel = title, yLabel
	for i, s := range series {
		var pts strings.Builder
		for j, v := range s.Points {
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(float64(j)), y(v))
		}
		l := line{Name: s.Name, Color: s.Color, Points: pts.String(), LY: T + 14 + float64(i)*16}
		if s.Dashed {
			l.Dash = "5,3"
		}
		d.Lines = append(d.Lines, l)
	}
	for _, b := range bands {
		d.Bands = append(d.Bands, band{X: x(b[0]), W: x(b[1]) - x(b[0])})
	}
	step := max(1, (n-1)/6)
	for i := 0; i < n; i += step {
		d.XTicks = append(d.XTicks, tick{Pos: x(float64(i)), Label: fmt.Sprintf("%d", i)})
	}
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		d.YTicks = append(d.YTicks, tick{Pos: y(v), Label: trimFloat(v)})
	}
	var b bytes.Buffer
	if err := svgTmpl.Execute(&b, d); err != nil {
		return []byte("<!-- " + err.Error() + " -->")
	}
	return b.Bytes()
}

func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

var svgTmpl = template.Must(template.New("svg").Parse(`<svg xmlns="http://www.w3.org/2000/svg" width="{{.W}}" height="{{.H}}" viewBox="0 0 {{.W}} {{.H}}" font-family="sans-serif" font-size="11">
<rect width="{{.W}}" height="{{.H}}" fill="white"/>
<text x="{{.L}}" y="16" font-size="13">{{.Title}}</text>
{{range .Bands}}<rect x="{{printf "%.1f" .X}}" y="{{$.T}}" width="{{printf "%.1f" .W}}" height="{{$.PH}}" fill="#f4cccc" opacity="0.6"/>
{{end}}<rect x="{{.L}}" y="{{.T}}" width="{{.PW}}" height="{{.PH}}" fill="none" stroke="#888"/>
{{range .YTicks}}<line x1="{{$.L}}" x2="{{$.XR}}" y1="{{printf "%.1f" .Pos}}" y2="{{printf "%.1f" .Pos}}" stroke="#eee"/><text x="{{$.L}}" dx="-4" y="{{printf "%.1f" .Pos}}" dy="4" text-anchor="end">{{.Label}}</text>
{{end}}{{range .XTicks}}<text x="{{printf "%.1f" .Pos}}" y="{{$.BY}}" dy="14" text-anchor="middle">{{.Label}}</text>
{{end}}<text x="{{printf "%.1f" .XM}}" y="{{.H}}" dy="-3" text-anchor="middle">seconds</text>
<text x="12" y="{{printf "%.1f" .YM}}" transform="rotate(-90 12 {{printf "%.1f" .YM}})" text-anchor="middle">{{.YLabel}}</text>
{{range .Lines}}<polyline fill="none" stroke="{{.Color}}" stroke-width="1.5"{{if .Dash}} stroke-dasharray="{{.Dash}}"{{end}} points="{{.Points}}"/>
<line x1="{{$.LX1}}" x2="{{$.LX2}}" y1="{{printf "%.1f" .LY}}" y2="{{printf "%.1f" .LY}}" stroke="{{.Color}}" stroke-width="2"{{if .Dash}} stroke-dasharray="{{.Dash}}"{{end}}/><text x="{{$.LX3}}" y="{{printf "%.1f" .LY}}" dy="4">{{.Name}}</text>
{{end}}</svg>
`))
