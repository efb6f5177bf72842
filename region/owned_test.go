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
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	pkg, err := conf.Check("github.com/quotaplatform/quota/region", fset, files, info)
	if err != nil {
		t.Fatal(err)
	}
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

// ownedStates are the types whose fields only their own methods use.
var ownedStates = []string{"quotaState", "localSlots"}

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
