// Package terraform_test checks the Terraform under deploy/terraform without Terraform: it parses
// every module directory with hashicorp/hcl/v2 and reports references that do not resolve.
//
// terraform validate covers the modules whose providers can be installed here (kubernetes, built
// from source by validate.sh). This test also covers examples/eks, which needs the AWS provider
// and so can only be parsed: every var., local., module., data. and resource reference must name
// something declared in its module; arguments of a local module call must be variables of the
// called module, and every variable without a default must be given; provider references must
// name a declared provider alias. It also checks that the root module's provider slots, region
// module blocks and the tests' mock providers and variables stay in step (see providers.tf), and
// that every flag the modules pass is one the binaries' Go source defines.
package terraform_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// moduleInfo is what one module directory declares, and the references it makes.
type moduleInfo struct {
	dir       string
	variables map[string]bool // name => required (no default)
	locals    map[string]bool
	outputs   map[string]bool
	modules   map[string]*moduleCall
	resources map[string]bool // "type.name"
	data      map[string]bool // "type.name"
	providers map[string]bool // "kubernetes", "kubernetes.slot0"
	refs      []hcl.Traversal
	provRefs  []hcl.Traversal // provider = x.y, providers = { k = x.y }
	sources   map[string][]byte
}

type moduleCall struct {
	source string
	args   []string
	rng    hcl.Range
	// providers: the module's provider name => the caller's provider it is bound to, e.g.
	// "kubernetes" => "kubernetes.slot2".
	providers map[string]string
}

// metaArgs are module block arguments that are not input variables.
var metaArgs = map[string]bool{
	"source": true, "version": true, "count": true, "for_each": true, "providers": true, "depends_on": true,
}

func loadModule(dir string) (*moduleInfo, error) {
	m := &moduleInfo{
		dir:       dir,
		variables: map[string]bool{},
		locals:    map[string]bool{},
		outputs:   map[string]bool{},
		modules:   map[string]*moduleCall{},
		resources: map[string]bool{},
		data:      map[string]bool{},
		providers: map[string]bool{},
		sources:   map[string][]byte{},
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.tf"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s: no .tf files", dir)
	}
	parser := hclparse.NewParser()
	for _, p := range paths {
		f, diags := parser.ParseHCLFile(p)
		if diags.HasErrors() {
			return nil, fmt.Errorf("parse %s: %w", p, diags)
		}
		m.sources[filepath.Base(p)] = f.Bytes
		body, ok := f.Body.(*hclsyntax.Body)
		if !ok {
			return nil, fmt.Errorf("%s: not native HCL syntax", p)
		}
		if err := m.addBody(body); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	return m, nil
}

func (m *moduleInfo) addBody(body *hclsyntax.Body) error {
	for _, b := range body.Blocks {
		switch b.Type {
		case "variable":
			_, hasDefault := b.Body.Attributes["default"]
			m.variables[b.Labels[0]] = !hasDefault
		case "locals":
			for name := range b.Body.Attributes {
				m.locals[name] = true
			}
		case "output":
			m.outputs[b.Labels[0]] = true
		case "resource":
			m.resources[b.Labels[0]+"."+b.Labels[1]] = true
		case "data":
			m.data[b.Labels[0]+"."+b.Labels[1]] = true
		case "provider":
			name := b.Labels[0]
			if a, ok := b.Body.Attributes["alias"]; ok {
				v, diags := a.Expr.Value(nil)
				if diags.HasErrors() {
					return fmt.Errorf("provider %s: alias must be a literal: %w", name, diags)
				}
				name += "." + v.AsString()
			}
			m.providers[name] = true
		case "module":
			call := &moduleCall{rng: b.DefRange()}
			for name, a := range b.Body.Attributes {
				switch {
				case name == "source":
					v, diags := a.Expr.Value(nil)
					if diags.HasErrors() {
						return fmt.Errorf("module %s: source must be a literal: %w", b.Labels[0], diags)
					}
					call.source = v.AsString()
				case name == "providers":
					obj, ok := a.Expr.(*hclsyntax.ObjectConsExpr)
					if !ok {
						return fmt.Errorf("module %s: providers must be an object", b.Labels[0])
					}
					call.providers = map[string]string{}
					for _, item := range obj.Items {
						t, diags := hcl.AbsTraversalForExpr(item.ValueExpr)
						if diags.HasErrors() {
							return fmt.Errorf("module %s: providers value: %w", b.Labels[0], diags)
						}
						m.provRefs = append(m.provRefs, t)
						if key := hcl.ExprAsKeyword(item.KeyExpr); key != "" && len(t) == 2 {
							if attr, ok := t[1].(hcl.TraverseAttr); ok {
								call.providers[key] = t.RootName() + "." + attr.Name
							}
						}
					}
					continue
				case !metaArgs[name]:
					call.args = append(call.args, name)
				}
			}
			sort.Strings(call.args)
			m.modules[b.Labels[0]] = call
		}
		if a, ok := b.Body.Attributes["provider"]; ok && (b.Type == "resource" || b.Type == "data") {
			t, diags := hcl.AbsTraversalForExpr(a.Expr)
			if diags.HasErrors() {
				return fmt.Errorf("%s %v: provider: %w", b.Type, b.Labels, diags)
			}
			m.provRefs = append(m.provRefs, t)
		}
	}
	hclsyntax.VisitAll(body, func(n hclsyntax.Node) hcl.Diagnostics {
		if a, ok := n.(*hclsyntax.Attribute); ok && a.Name != "providers" && a.Name != "provider" {
			m.refs = append(m.refs, a.Expr.Variables()...)
		}
		return nil
	})
	return nil
}

// isLocalSource reports whether a module source is a directory of this repository.
func isLocalSource(s string) bool { return strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") }

// resourceType matches the first word of a resource reference such as aws_rds_cluster.ledger.
var resourceType = regexp.MustCompile(`^(aws|kubernetes|random|null|tls)_[a-z0-9_]+$`)

func attrName(s hcl.Traverser) (string, bool) {
	a, ok := s.(hcl.TraverseAttr)
	return a.Name, ok
}

// problems lists every reference of m that does not resolve. load returns the module in another
// directory (for local module calls).
func problems(m *moduleInfo, load func(dir string) (*moduleInfo, error)) []string {
	var out []string
	add := func(rng hcl.Range, format string, args ...any) {
		out = append(out, fmt.Sprintf("%s:%d: %s", filepath.Base(rng.Filename), rng.Start.Line, fmt.Sprintf(format, args...)))
	}
	for _, t := range m.refs {
		root := t.RootName()
		rng := t.SourceRange()
		var first, second string
		if len(t) > 1 {
			first, _ = attrName(t[1])
		}
		if len(t) > 2 {
			second, _ = attrName(t[2])
		}
		switch {
		case root == "var":
			if _, ok := m.variables[first]; !ok {
				add(rng, "var.%s is not declared", first)
			}
		case root == "local":
			if !m.locals[first] {
				add(rng, "local.%s is not declared", first)
			}
		case root == "data":
			if !m.data[first+"."+second] {
				add(rng, "data.%s.%s is not declared", first, second)
			}
		case root == "module":
			call, ok := m.modules[first]
			if !ok {
				add(rng, "module.%s is not declared", first)
				continue
			}
			// module.x.out or module.x[0].out; a bare module.x (e.g. in a for) is fine.
			var out string
			for _, s := range t[2:] {
				if name, ok := attrName(s); ok {
					out = name
					break
				}
			}
			if out == "" || !isLocalSource(call.source) {
				continue
			}
			child, err := load(filepath.Join(m.dir, call.source))
			if err != nil {
				add(rng, "module.%s: %v", first, err)
				continue
			}
			if !child.outputs[out] {
				add(rng, "module.%s.%s: %s declares no output %q", first, out, call.source, out)
			}
		case resourceType.MatchString(root):
			if !m.resources[root+"."+first] {
				add(rng, "%s.%s is not declared", root, first)
			}
		}
	}
	for _, t := range m.provRefs {
		name := t.RootName()
		if len(t) > 1 {
			alias, _ := attrName(t[1])
			name += "." + alias
		}
		if !m.providers[name] {
			add(t.SourceRange(), "provider %s is not declared in this module", name)
		}
	}
	names := make([]string, 0, len(m.modules))
	for name := range m.modules {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		call := m.modules[name]
		if !isLocalSource(call.source) {
			continue
		}
		child, err := load(filepath.Join(m.dir, call.source))
		if err != nil {
			add(call.rng, "module %s: %v", name, err)
			continue
		}
		given := map[string]bool{}
		for _, a := range call.args {
			given[a] = true
			if _, ok := child.variables[a]; !ok {
				add(call.rng, "module %s: %s has no variable %q", name, call.source, a)
			}
		}
		for v, required := range child.variables {
			if required && !given[v] {
				add(call.rng, "module %s: required variable %q of %s is not given", name, v, call.source)
			}
		}
	}
	sort.Strings(out)
	return out
}

// moduleDirs returns every directory under root holding .tf files, .terraform excluded.
func moduleDirs(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".terraform" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".tf") {
			dir := filepath.Dir(p)
			if len(dirs) == 0 || dirs[len(dirs)-1] != dir {
				dirs = append(dirs, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

func cachedLoader() func(string) (*moduleInfo, error) {
	cache := map[string]*moduleInfo{}
	return func(dir string) (*moduleInfo, error) {
		dir = filepath.Clean(dir)
		if m, ok := cache[dir]; ok {
			return m, nil
		}
		m, err := loadModule(dir)
		if err != nil {
			return nil, err
		}
		cache[dir] = m
		return m, nil
	}
}

func TestReferencesResolve(t *testing.T) {
	load := cachedLoader()
	dirs := moduleDirs(t, ".")
	for _, want := range []string{".", "modules/region", "modules/ledger", "modules/monitoring", "examples/eks", "examples/single-cluster"} {
		found := false
		for _, d := range dirs {
			found = found || d == filepath.Clean(want)
		}
		if !found {
			t.Errorf("module directory %s is missing", want)
		}
	}
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			m, err := load(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range problems(m, load) {
				t.Error(p)
			}
		})
	}
}

// TestProviderSlots checks that the root module's fixed provider slots, its region module blocks,
// the region_out merge, the slot validation and the tests' mock providers agree.
func TestProviderSlots(t *testing.T) {
	m, err := loadModule(".")
	if err != nil {
		t.Fatal(err)
	}
	var slots []string
	for p := range m.providers {
		if s, ok := strings.CutPrefix(p, "kubernetes.slot"); ok {
			slots = append(slots, s)
		}
	}
	sort.Strings(slots)
	if len(slots) == 0 {
		t.Fatal("no kubernetes.slotN providers in the root module")
	}
	for i, s := range slots {
		if s != fmt.Sprint(i) {
			t.Fatalf("provider slots must be numbered 0..n-1 without gaps, got %v", slots)
		}
		// Each slot has one region, one ledger and one monitoring module, bound to that slot's
		// provider and no other: whatever Terraform does for a region, it does through its own
		// cluster.
		for _, kind := range []string{"region", "ledger", "monitoring"} {
			call, ok := m.modules[kind+"_"+s]
			if !ok {
				t.Errorf("provider kubernetes.slot%s has no module \"%s_%s\"", s, kind, s)
				continue
			}
			if call.source != "./modules/"+kind {
				t.Errorf("module %s_%s: source %q, want ./modules/%s", kind, s, call.source, kind)
			}
			if got, want := call.providers, map[string]string{"kubernetes": "kubernetes.slot" + s}; len(got) != 1 || got["kubernetes"] != want["kubernetes"] {
				t.Errorf("module %s_%s: providers %v, want exactly %v", kind, s, got, want)
			}
		}
	}
	for name := range m.modules {
		for _, kind := range []string{"region_", "ledger_", "monitoring_"} {
			if s, ok := strings.CutPrefix(name, kind); ok && !m.providers["kubernetes.slot"+s] {
				t.Errorf("module %s has no provider kubernetes.slot%s", name, s)
			}
		}
	}
	for p := range m.providers {
		if p != "kubernetes" && !strings.HasPrefix(p, "kubernetes.slot") {
			t.Errorf("provider %s: the root module has slot providers only", p)
		}
	}
	n := len(slots)
	src := string(m.sources["variables.tf"]) + string(m.sources["providers.tf"]) + string(m.sources["regions.tf"]) + string(m.sources["ledger.tf"]) + string(m.sources["monitoring.tf"])
	for _, want := range []string{
		fmt.Sprintf("length(var.regions) <= %d", n),
		fmt.Sprintf("r.slot <= %d", n-1),
		fmt.Sprintf(`slots        = [%s]`, quotedRange(n)),
		"module.ledger_" + fmt.Sprint(n-1) + ")",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("root module does not contain %q: update it for %d slots", want, n)
		}
	}
	// Each region gets only its own region's credentials: a token or key of one region must work
	// in no other.
	regions := string(m.sources["regions.tf"])
	for i := range n {
		block := regexp.MustCompile(fmt.Sprintf(`(?s)module "region_%d" \{.*?\n\}`, i)).FindString(regions)
		for _, v := range []string{"memberlist_keys", "redis_password", "check_tokens", "read_tokens"} {
			arg := regexp.MustCompile(`(?m)^\s*` + v + `\s*=\s*(.*)$`).FindStringSubmatch(block)
			if arg == nil || !strings.Contains(arg[1], fmt.Sprintf(`local.slot_region["%d"]`, i)) {
				t.Errorf("module region_%d: %s must be its own region's (indexed by local.slot_region[\"%d\"]), got %q", i, v, i, arg)
			}
		}
	}
	for i := range n {
		if !strings.Contains(src, fmt.Sprintf("{ for m in module.region_%d : m.name => m }", i)) {
			t.Errorf("local.region_out does not merge module.region_%d", i)
		}
		if !strings.Contains(src, fmt.Sprintf("{ for m in module.monitoring_%d : m.region => m }", i)) {
			t.Errorf("local.monitoring_out does not merge module.monitoring_%d", i)
		}
	}

	tests, err := filepath.Glob("tests/*.tftest.hcl")
	if err != nil || len(tests) == 0 {
		t.Fatalf("no tests/*.tftest.hcl (%v)", err)
	}
	parser := hclparse.NewParser()
	load := cachedLoader()
	for _, p := range tests {
		f, diags := parser.ParseHCLFile(p)
		if diags.HasErrors() {
			t.Fatalf("parse %s: %v", p, diags)
		}
		checkTestFile(t, p, f.Body.(*hclsyntax.Body), m, load)
	}
}

// checkTestFile checks one terraform test file against the modules it tests. A run block tests
// the root module, or the module its nested module { source = ... } names (relative to the root).
// The variables of each run (its own and the file's) must be variables of the module it tests and
// cover that module's required ones. A file with a root-module run mocks every provider of the
// root module; a file with a run of another module mocks the default (unaliased) provider.
func checkTestFile(t *testing.T, path string, body *hclsyntax.Body, root *moduleInfo, load func(string) (*moduleInfo, error)) {
	t.Helper()
	mocked := map[string]bool{}
	fileVars := map[string]bool{}
	checkVars := func(b *hclsyntax.Block, target *moduleInfo, what string) map[string]bool {
		set := map[string]bool{}
		for name := range b.Body.Attributes {
			set[name] = true
			if _, ok := target.variables[name]; !ok {
				t.Errorf("%s:%d: variables sets %q, which %s does not declare", path, b.DefRange().Start.Line, name, what)
			}
		}
		return set
	}
	type run struct {
		block  *hclsyntax.Block
		target *moduleInfo
		what   string
	}
	var runs []run
	for _, b := range body.Blocks {
		switch b.Type {
		case "mock_provider":
			name := b.Labels[0]
			if a, ok := b.Body.Attributes["alias"]; ok {
				v, _ := a.Expr.Value(nil)
				name += "." + v.AsString()
			}
			mocked[name] = true
		case "run":
			r := run{block: b, target: root, what: "the root module"}
			for _, inner := range b.Body.Blocks {
				if inner.Type != "module" {
					continue
				}
				a, ok := inner.Body.Attributes["source"]
				if !ok {
					t.Errorf("%s:%d: run %q: module block without source", path, inner.DefRange().Start.Line, b.Labels[0])
					continue
				}
				v, diags := a.Expr.Value(nil)
				if diags.HasErrors() || !isLocalSource(v.AsString()) {
					t.Errorf("%s:%d: run %q: module source must be a local path literal", path, inner.DefRange().Start.Line, b.Labels[0])
					continue
				}
				target, err := load(filepath.Join(root.dir, v.AsString()))
				if err != nil {
					t.Errorf("%s:%d: run %q: %v", path, inner.DefRange().Start.Line, b.Labels[0], err)
					continue
				}
				r.target, r.what = target, v.AsString()
			}
			runs = append(runs, r)
		}
	}
	for _, b := range body.Blocks {
		if b.Type == "variables" {
			for name := range checkVars(b, root, "the root module") {
				fileVars[name] = true
			}
		}
	}
	rootRuns, moduleRuns := 0, 0
	for _, r := range runs {
		given := map[string]bool{}
		for name := range fileVars {
			given[name] = true
		}
		for _, inner := range r.block.Body.Blocks {
			if inner.Type == "variables" {
				for name := range checkVars(inner, r.target, r.what) {
					given[name] = true
				}
			}
		}
		for v, required := range r.target.variables {
			if required && !given[v] {
				t.Errorf("%s:%d: run %q: required variable %q of %s is not set", path, r.block.DefRange().Start.Line, r.block.Labels[0], v, r.what)
			}
		}
		if r.target == root {
			rootRuns++
		} else {
			moduleRuns++
		}
	}
	if rootRuns > 0 {
		for prov := range root.providers {
			if !mocked[prov] {
				t.Errorf("%s: no mock_provider for %s", path, prov)
			}
		}
	}
	if moduleRuns > 0 && !mocked["kubernetes"] {
		t.Errorf("%s: runs of modules/* need a mock_provider \"kubernetes\" without alias", path)
	}
}

func quotedRange(n int) string {
	q := make([]string, n)
	for i := range q {
		q[i] = fmt.Sprintf("%q", fmt.Sprint(i))
	}
	return strings.Join(q, ", ")
}

// TestProblemsFindsBrokenReferences feeds the checker modules with one defect each.
func TestProblemsFindsBrokenReferences(t *testing.T) {
	child := `
variable "needed" {}
variable "optional" {
  default = 1
}
output "out" {
  value = var.needed
}
`
	tests := []struct {
		name string
		root string
		want string // substring of the one expected problem; "" = none
	}{
		{"clean", `
variable "a" {}
locals {
  b = var.a
}
module "c" {
  source = "./child"
  needed = local.b
}
output "d" {
  value = [module.c.out, [for m in [module.c] : m.out]]
}`, ""},
		{"undeclared variable", `output "x" {
  value = var.nope
}`, "var.nope is not declared"},
		{"undeclared local", `output "x" {
  value = local.nope
}`, "local.nope is not declared"},
		{"undeclared module", `output "x" {
  value = module.nope.out
}`, "module.nope is not declared"},
		{"missing output", `
module "c" {
  source = "./child"
  needed = 1
}
output "x" {
  value = module.c.nope
}`, `declares no output "nope"`},
		{"unknown argument", `
module "c" {
  source = "./child"
  needed = 1
  extra  = 2
}`, `has no variable "extra"`},
		{"missing required argument", `
module "c" {
  source   = "./child"
  optional = 2
}`, `required variable "needed"`},
		{"undeclared resource", `output "x" {
  value = aws_rds_cluster.nope.endpoint
}`, "aws_rds_cluster.nope is not declared"},
		{"undeclared data", `output "x" {
  value = data.aws_eks_cluster.nope.endpoint
}`, "data.aws_eks_cluster.nope is not declared"},
		{"undeclared provider", `
module "c" {
  source    = "./child"
  providers = { kubernetes = kubernetes.nope }
  needed    = 1
}`, "provider kubernetes.nope is not declared"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "child"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "child", "main.tf"), []byte(child), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(tt.root), 0o644); err != nil {
				t.Fatal(err)
			}
			load := cachedLoader()
			m, err := load(dir)
			if err != nil {
				t.Fatal(err)
			}
			got := problems(m, load)
			switch {
			case tt.want == "" && len(got) != 0:
				t.Fatalf("problems = %q, want none", got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want)):
				t.Fatalf("problems = %q, want one containing %q", got, tt.want)
			}
		})
	}
}

// TestFlagsMatchContract checks every flag and QUOTA_* variable the modules hand to the binaries
// against the flags the binaries declare (the settings tables generated from their declarations,
// in cmd/regional-limiter/README.md and docs/configuration.md): a typo, or a flag the binary does not have yet, would
// otherwise only show up as a crash-looping pod.
func TestFlagsMatchContract(t *testing.T) {
	limiter := daemonFlags(t, "../../cmd/regional-limiter/README.md")
	tests := []struct {
		dir   string
		file  string // a file that configures the binary's containers
		flags map[string]bool
	}{
		{"modules/region", "limiter.tf", limiter},
		{"modules/region", "controlplane.tf", limiter},
		{"modules/ledger", "main.tf", daemonFlags(t, "../../docs/configuration.md")},
	}
	flagRE := regexp.MustCompile(`"--([a-z][a-z-]*)`)
	envRE := regexp.MustCompile(`"QUOTA_([A-Z_]+)"`)
	for _, tt := range tests {
		t.Run(tt.dir+"/"+tt.file, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join(tt.dir, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			seen := 0
			for _, match := range flagRE.FindAllStringSubmatch(string(src), -1) {
				seen++
				if !tt.flags[match[1]] {
					t.Errorf("%s: --%s is not a flag of the binary (not defined in its Go source)", tt.file, match[1])
				}
			}
			for _, match := range envRE.FindAllStringSubmatch(string(src), -1) {
				seen++
				flag := strings.ReplaceAll(strings.ToLower(match[1]), "_", "-")
				if !tt.flags[flag] {
					t.Errorf("%s: QUOTA_%s names no flag (--%s)", tt.file, match[1], flag)
				}
			}
			if seen == 0 {
				t.Errorf("%s: found no flags at all: the check is not looking at the right file", tt.file)
			}
		})
	}
}

// TestProviderConstraint checks that every module pins the kubernetes provider to the series
// validate.sh builds and validates against.
func TestProviderConstraint(t *testing.T) {
	script, err := os.ReadFile("validate.sh")
	if err != nil {
		t.Fatal(err)
	}
	v := regexp.MustCompile(`(?m)^PROVIDER_VERSION=(\S+)$`).FindSubmatch(script)
	if v == nil {
		t.Fatal("validate.sh: no PROVIDER_VERSION=")
	}
	want := fmt.Sprintf(`version = "~> %s"`, v[1])
	for _, dir := range moduleDirs(t, ".") {
		m, err := loadModule(dir)
		if err != nil {
			t.Fatal(err)
		}
		var all strings.Builder
		for _, src := range m.sources {
			all.Write(src)
		}
		src := all.String()
		i := strings.Index(src, `source  = "hashicorp/kubernetes"`)
		if i < 0 {
			if dir == "." || strings.HasPrefix(dir, "modules") {
				t.Errorf("%s: no required_providers entry for hashicorp/kubernetes", dir)
			}
			continue
		}
		if !strings.Contains(src[i:], want) {
			t.Errorf("%s: kubernetes provider constraint must be %s (what validate.sh validates)", dir, want)
		}
	}
}

// daemonFlags returns the flags a binary declares, all subcommands together, read from the
// settings tables generated from its declarations (between the markers in doc; the binary's own
// tests fail when a table differs from the code). Every flag also reads env QUOTA_<FLAG>, which
// is how the modules pass secrets.
func daemonFlags(t *testing.T, doc string) map[string]bool {
	t.Helper()
	src, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	begin := bytes.Index(src, []byte("<!-- settings table"))
	end := bytes.Index(src, []byte("<!-- end of settings table"))
	if begin < 0 || end < begin {
		t.Fatalf("%s: no generated settings table between its markers", doc)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z][a-z0-9-]*)`").FindAllSubmatch(src[begin:end], -1) {
		flags[string(m[1])] = true
	}
	for _, want := range []string{"listen", "nats", "log-level"} {
		if !flags[want] {
			t.Fatalf("%s: found no --%s row (found %d flags): has the table changed shape?", doc, want, len(flags))
		}
	}
	return flags
}
