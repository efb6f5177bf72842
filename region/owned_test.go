package region

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"strings"
	"testing"
)

// TestStatesOwnTheirFields: only the methods of a capability's
// in-process state read or write its fields: a key's quota lease
// (quotaState: split, the degraded budget, base requests, returns;
// docs/design.md [quotas]) and the slots granted while the store is away
// (localSlots). The lease engine reaches them through those methods,
// wherever it stands in the package.
func TestStatesOwnTheirFields(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the package from source")
	}
	fset, files, info, pkg := typeCheckRegion(t)
	owner := map[*types.Var]string{} // field → the type that owns it
	for _, name := range ownedStates {
		st := pkg.Scope().Lookup(name).Type().Underlying().(*types.Struct)
		for i := range st.NumFields() {
			owner[st.Field(i)] = name
		}
	}
	checked := 0
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			recv := receiverType(fn)
			if o, ok := ownerFuncs[fn.Name.Name]; ok && fn.Recv == nil {
				recv = o
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if s := info.Selections[sel]; s != nil && s.Kind() == types.FieldVal {
					if o := owner[s.Obj().(*types.Var)]; o != "" && o != recv {
						t.Errorf("%s: %s uses %s.%s: call a method of %s instead", fset.Position(sel.Pos()), fn.Name.Name, o, sel.Sel.Name, o)
					}
				}
				checked++
				return true
			})
		}
	}
	if checked == 0 {
		t.Fatal("no selector expression checked")
	}
}

// typeCheckRegion parses and type-checks the package's non-test files.
func typeCheckRegion(t *testing.T) (*token.FileSet, []*ast.File, *types.Info, *types.Package) {
	t.Helper()
	fset := token.NewFileSet()
	names, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, n := range names {
		if !strings.HasSuffix(n.Name(), ".go") || strings.HasSuffix(n.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	pkg, err := conf.Check("github.com/quotaplatform/quota/region", fset, files, info)
	if err != nil {
		t.Fatal(err)
	}
	return fset, files, info, pkg
}

// TestOneStoreCall: every call of a store method (store.Store,
// QuotaStore, RequestStore, SlotStore) is made by storeCall, inside the
// function literal passed to it, so that every capability's calls share
// one deadline, timing, counting, observer, span, bounds check, key-error
// count and clock-offset rule.
func TestOneStoreCall(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the package from source")
	}
	fset, files, info, pkg := typeCheckRegion(t)
	storePkg := pkg.Imports()
	var contract *types.Package
	for _, p := range storePkg {
		if p.Path() == "github.com/quotaplatform/quota/region/store" {
			contract = p
		}
	}
	if contract == nil {
		t.Fatal("region does not import the store contract")
	}
	methods := map[*types.Func]bool{}
	for _, name := range []string{"Store", "QuotaStore", "RequestStore", "SlotStore"} {
		iface := contract.Scope().Lookup(name).Type().Underlying().(*types.Interface)
		for i := range iface.NumMethods() {
			methods[iface.Method(i)] = true
		}
	}
	// wrapped holds the function literals passed to storeCall.
	wrapped := map[*ast.FuncLit]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			fun := call.Fun
			if ix, ok := fun.(*ast.IndexExpr); ok {
				fun = ix.X
			}
			if id, ok := fun.(*ast.Ident); ok && id.Name == "storeCall" {
				for _, a := range call.Args {
					if lit, ok := a.(*ast.FuncLit); ok {
						wrapped[lit] = true
					}
				}
			}
			return true
		})
	}
	found := 0
	for _, f := range files {
		var inside []bool // per enclosing function literal: passed to storeCall
		var visit func(n ast.Node) bool
		visit = func(n ast.Node) bool {
			if lit, ok := n.(*ast.FuncLit); ok {
				inside = append(inside, wrapped[lit])
				ast.Inspect(lit.Body, visit)
				inside = inside[:len(inside)-1]
				return false
			}
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			s := info.Selections[sel]
			if s == nil || s.Kind() != types.MethodVal {
				return true
			}
			m, ok := s.Obj().(*types.Func)
			if !ok || !methods[m.Origin()] && !implementsStoreMethod(m, methods) {
				return true
			}
			found++
			if len(inside) == 0 || !inside[len(inside)-1] {
				t.Errorf("%s: %s called outside storeCall: pass it to storeCall as its call", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		}
		ast.Inspect(f, visit)
	}
	if found < 5 {
		t.Fatalf("found %d store calls, want the lease, quota, request and two slot calls at least", found)
	}
}

// implementsStoreMethod reports whether m is a method of the store
// contract's interfaces (called through an interface value whose type is
// the contract's).
func implementsStoreMethod(m *types.Func, methods map[*types.Func]bool) bool {
	for c := range methods {
		if c.Name() == m.Name() && types.Identical(c.Type(), m.Type()) {
			return true
		}
	}
	return false
}

// ownerFuncs are functions that count as methods of a type: Go methods
// take no type parameters, so storeClient's generic call is a function.
var ownerFuncs = map[string]string{"storeCall": "storeClient"}

// ownedStates are the types whose fields only their own methods use.
var ownedStates = []string{"quotaState", "localSlots", "idempotency", "quotas", "slots", "storeClient", "planCache"}

// receiverType names the type of fn's pointer receiver; "" for a function
// or another receiver.
func receiverType(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) != 1 {
		return ""
	}
	star, ok := fn.Recv.List[0].Type.(*ast.StarExpr)
	if !ok {
		return ""
	}
	if id, ok := star.X.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// maxMethods bounds the methods of any one type in the package, exported
// and unexported: a capability is a type of its own, composed by a thin
// Limiter, not another file of one engine type (x/time/rate's Limiter
// has 22).
const maxMethods = 30

// TestNoTypeOverMaxMethods: no type of the package declares more than
// maxMethods methods.
func TestNoTypeOverMaxMethods(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the package from source")
	}
	_, _, _, pkg := typeCheckRegion(t)
	checked := 0
	for _, name := range pkg.Scope().Names() {
		tn, ok := pkg.Scope().Lookup(name).(*types.TypeName)
		if !ok {
			continue
		}
		named, ok := tn.Type().(*types.Named)
		if !ok {
			continue
		}
		checked++
		if n := named.NumMethods(); n > maxMethods {
			t.Errorf("%s has %d methods, more than %d: move a capability into a type of its own", name, n, maxMethods)
		}
	}
	if checked == 0 {
		t.Fatal("no type checked")
	}
}

// TestOneBreakerVerdict: the breaker hears how store calls went from
// storeCall alone (by the call's verdict), and from the background probe,
// whose rule is its own: no capability judges a call itself.
func TestOneBreakerVerdict(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the package from source")
	}
	fset, files, info, _ := typeCheckRegion(t)
	allowed := map[string]bool{"storeCall": true, "probeInBackground": true}
	found := 0
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "failure" && sel.Sel.Name != "success" {
					return true
				}
				s := info.Selections[sel]
				if s == nil || s.Kind() != types.MethodVal || !strings.HasSuffix(s.Recv().String(), ".breaker") {
					return true
				}
				found++
				if !allowed[fn.Name.Name] {
					t.Errorf("%s: %s tells the breaker itself: give its storeCall a verdict instead", fset.Position(sel.Pos()), fn.Name.Name)
				}
				return true
			})
		}
	}
	if found < 2 {
		t.Fatalf("found %d breaker verdicts, want storeCall's at least", found)
	}
}
