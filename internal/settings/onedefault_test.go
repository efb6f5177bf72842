package settings_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestOneDefault: every setting's default is written in one place. It
// parses the module's Go sources (tests aside) for the places a default is
// written as a value (a literal, a time unit, arithmetic on them; not a
// zero value, and not a name of another default):
//
//   - a field of a composite literal, or an assignment to a field, in a
//     function named Default… or default… (DefaultConfig, DefaultOptions);
//   - a package-level Default… or default… constant or variable;
//   - a flag's default: the third argument of internal/settings' and
//     flag.FlagSet's declarations (String, DurationVar, …).
//
// A setting is known by its name, lower case without dashes: field Window,
// flag --window and constant DefaultWindow are one setting; a flag counts
// under its own name and under the field it binds to (--processes binds
// Limiter.ProcessEstimate). Two places writing a default for one name fail
// the test unless all but one are listed in distinctSettings, which says
// why they are different settings that share a name. A second default of
// the window, the reconciler's batch size or a daemon's shutdown delay
// fails it: the place that is not the owner must name the owner's default.
func TestOneDefault(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	sites := scanDefaults(t, root)
	if len(sites) < 100 {
		t.Fatalf("found %d default declarations; the scan is broken", len(sites))
	}
	byName := map[string][]defaultSite{}
	for _, s := range sites {
		byName[s.setting] = append(byName[s.setting], s)
	}
	listed := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		var owners []string
		for _, s := range byName[name] {
			if _, ok := distinctSettings[s.id]; ok {
				listed[s.id] = true
				continue
			}
			owners = append(owners, fmt.Sprintf("%s (%s = %s)", s.pos, s.id, s.value))
		}
		if len(owners) > 1 {
			t.Errorf("setting %q has a default written in %d places; write it once, and name it elsewhere (region.DefaultConfig().X, a Default… constant), or list the others in distinctSettings with why they differ:\n\t%s",
				name, len(owners), strings.Join(owners, "\n\t"))
		}
	}
	for id := range distinctSettings {
		if !listed[id] {
			t.Errorf("distinctSettings lists %s, which writes no default any more: remove it", id)
		}
	}
}

// distinctSettings are default declarations that share a name with
// another's but are a different setting, each with why.
var distinctSettings = map[string]string{
	// Each binary listens on a port of its own (and must).
	"cmd/reconciler: options.Listen":  "the reconciler's HTTP port",
	"examples/weighted-api: --listen": "the example's HTTP port",
	// The daemon's participant introduces itself by the daemon's name.
	"cmd/regional-limiter: Name": "the daemon's connection names",
	// The example is a service of its own with its own data and a
	// smaller built-in plan.
	"examples/weighted-api: --data-dir":         "the example's data directory",
	"examples/weighted-api: --default-rate":     "the example's built-in plan",
	"examples/weighted-api: --default-capacity": "the example's built-in plan",
	// Reconciler subcommands whose flags share a name.
	"cmd/reconciler: --format":      "export's format (csv, ndjson), not usage's (json, csv, text)",
	"cmd/reconciler: --granularity": "the sinks' and export's period, not usage's bucket",
	// Caps of different things.
	"gossip: Config.MaxKeys":             "keys in a gossip digest, not the limiter's tracked keys",
	"ledger: Config.MaxKeys":             "(key, window) counters of the reporter, not the limiter's keys",
	"internal/limitapi: Config.MaxBatch": "checks in one /v1/allow/batch request",
	"ledger/quotabase: DefaultQueue":     "a NATS queue group",
	// Periods of different loops.
	"ledger/reconcile: CloserConfig.Interval":   "how often the closer looks for silent processes",
	"catalog: Config.RetryInterval":             "the catalogue watch's retry",
	"catalog: Config.WriteTimeout":              "one catalogue write to NATS",
	"ledger/planmirror: Config.WriteTimeout":    "one mirror transaction in Postgres",
	"ledger/export: Config.StatementTimeout":    "one page of an export, not a usage query",
	"ledger/quotabase: Config.StatementTimeout": "one quota-base query",
	"ledger/quotabase: ClientConfig.Timeout":    "one quota-base request over NATS",
	// Names of different things.
	"ledger/reconcile: CloserConfig.Name": "the closer's lock holder name",
	"ledger/quotabase: DefaultSubject":    "the quota-base request subject",
	"catalog: Config.Replicas":            "the catalogue bucket's replicas, not the usage stream's",
	// Tools outside the daemons.
	"deploy/terraform/applytest/cmd/applycheck: --timeout": "a test tool's deadline",
}

// A defaultSite is one place a setting's default is written as a value.
type defaultSite struct {
	setting string // normalised name
	id      string // package directory: Type.Field, --flag or constant
	pos     string // file:line from the module root
	value   string
}

var defaultName = regexp.MustCompile(`^[Dd]efault[A-Z]`)

// flagDecls are the methods that declare a flag with its name and default
// as arguments (internal/settings.Set and flag.FlagSet); the Var forms
// take the bound pointer first.
var flagDecls = map[string]bool{
	"String": true, "Bool": true, "Int": true, "Int64": true, "Uint": true, "Uint64": true, "Float64": true, "Duration": true,
	"StringVar": true, "BoolVar": true, "IntVar": true, "Int64Var": true, "UintVar": true, "Uint64Var": true, "Float64Var": true, "DurationVar": true,
}

func normalise(name string) string {
	return strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(name))
}

// written is the text of e when e writes a value out (literals, time
// units, arithmetic on them) other than a zero value.
func written(fset *token.FileSet, e ast.Expr) (string, bool) {
	ok := true
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case nil, *ast.BasicLit, *ast.BinaryExpr, *ast.UnaryExpr, *ast.ParenExpr:
		case *ast.SelectorExpr: // time.Second, and nothing else
			x, isIdent := n.X.(*ast.Ident)
			ok = ok && isIdent && x.Name == "time"
			return false
		case *ast.Ident:
			ok = ok && n.Name == "true"
		default:
			ok = false
		}
		return ok
	})
	if !ok {
		return "", false
	}
	var b strings.Builder
	if err := printer.Fprint(&b, fset, e); err != nil {
		return "", false
	}
	v := b.String()
	if c, err := strconv.Unquote(v); err == nil && c == "" || v == "0" || v == "0.0" {
		return v, false
	}
	return v, true
}

// typeName is the name of a composite literal's type, "" for none.
func typeName(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name + "."
	case *ast.SelectorExpr:
		return t.Sel.Name + "."
	}
	return ""
}

func scanDefaults(t *testing.T, root string) []defaultSite {
	t.Helper()
	fset := token.NewFileSet()
	var sites []defaultSite
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		// test/ holds the harnesses, whose specs are scenarios, not defaults.
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || rel == "test") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		add := func(id string, at token.Pos, v ast.Expr, names ...string) {
			val, ok := written(fset, v)
			if !ok {
				return
			}
			p := fset.Position(at)
			seen := map[string]bool{}
			for _, n := range names {
				if n = normalise(n); n != "" && !seen[n] {
					seen[n] = true
					sites = append(sites, defaultSite{n, pkg + ": " + id, fmt.Sprintf("%s:%d", rel, p.Line), val})
				}
			}
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.GenDecl:
				if decl.Tok != token.CONST && decl.Tok != token.VAR {
					continue
				}
				for _, spec := range decl.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i < len(vs.Values) && defaultName.MatchString(n.Name) {
							add(n.Name, n.Pos(), vs.Values[i], n.Name[len("default"):])
						}
					}
				}
			case *ast.FuncDecl:
				scanFunc(decl, defaultName.MatchString(decl.Name.Name), add)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sites
}

// scanFunc records fn's flag declarations and, in a Default… function,
// the fields it gives values.
func scanFunc(fn *ast.FuncDecl, isDefault bool, add func(id string, at token.Pos, v ast.Expr, names ...string)) {
	ast.Inspect(fn, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CompositeLit:
			if isDefault {
				for _, el := range n.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						if k, ok := kv.Key.(*ast.Ident); ok {
							add(typeName(n.Type)+k.Name, kv.Pos(), kv.Value, k.Name)
						}
					}
				}
			}
		case *ast.AssignStmt:
			if isDefault && len(n.Lhs) == len(n.Rhs) {
				for i, l := range n.Lhs {
					if s, ok := l.(*ast.SelectorExpr); ok {
						add(s.Sel.Name, n.Pos(), n.Rhs[i], s.Sel.Name)
					}
				}
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || !flagDecls[sel.Sel.Name] {
				return true
			}
			args, bound := n.Args, ""
			if len(args) == 4 { // ptr, name, default, help
				if u, ok := args[0].(*ast.UnaryExpr); ok && u.Op == token.AND {
					if s, ok := u.X.(*ast.SelectorExpr); ok {
						bound = s.Sel.Name
					}
				}
				args = args[1:]
			}
			if len(args) != 3 {
				return true
			}
			lit, ok := args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			name, _ := strconv.Unquote(lit.Value)
			add("--"+name, n.Pos(), args[1], name, bound)
		}
		return true
	})
}
