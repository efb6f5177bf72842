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

// TestQuotaStateOwnsItsFields: only quotaState's own methods read or
// write its fields. The lease engine reaches a key's quota lease through
// those methods, wherever it stands in the package, so that the quota
// state's rules (split, the degraded budget, base requests, returns) are
// kept in one place (docs/design.md [quotas]).
func TestQuotaStateOwnsItsFields(t *testing.T) {
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
	st := pkg.Scope().Lookup("quotaState").Type().Underlying().(*types.Struct)
	own := map[*types.Var]bool{}
	for i := range st.NumFields() {
		own[st.Field(i)] = true
	}
	checked := 0
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || isQuotaStateMethod(fn) {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if s := info.Selections[sel]; s != nil && s.Kind() == types.FieldVal && own[s.Obj().(*types.Var)] {
					t.Errorf("%s: %s uses quotaState.%s: call a method of quotaState instead", fset.Position(sel.Pos()), fn.Name.Name, sel.Sel.Name)
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

func isQuotaStateMethod(fn *ast.FuncDecl) bool {
	if fn.Recv == nil || len(fn.Recv.List) != 1 {
		return false
	}
	star, ok := fn.Recv.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	id, ok := star.X.(*ast.Ident)
	return ok && id.Name == "quotaState"
}
