package sandbox_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// domainFiles parses the domain's non-test Go files: internal/sandbox and its sub-packages,
// but not sandboxtest (the fake provider and manual clock the domain's tests use).
func domainFiles(t *testing.T) (*token.FileSet, map[string]*ast.File) {
	t.Helper()
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "sandboxtest" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files[path] = f
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return fset, files
}

// calls visits every call in files with the function declaration it is written in.
func calls(files map[string]*ast.File, visit func(path string, fn *ast.FuncDecl, call *ast.CallExpr)) {
	for path, f := range files {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					visit(path, fn, call)
				}
				return true
			})
		}
	}
}

// funcName is fn as "Recv.name" (methods) or "name".
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	typ := fn.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

// TestOneLease pins issue 34's "one lease": exactly one function of the domain calls a
// provider's Attach or Create for a session (lease.go's reach), and only the lease calls it.
// An operation that needs a session's sandbox takes a lease (Service.lease) instead of
// writing the sequence again.
func TestOneLease(t *testing.T) {
	fset, files := domainFiles(t)
	reachers := map[string][]string{} // function → where it calls Attach/Create
	callers := map[string]bool{}      // functions calling reach
	calls(files, func(path string, fn *ast.FuncDecl, call *ast.CallExpr) {
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return
		}
		switch sel.Sel.Name {
		case "Attach", "Create":
			reachers[funcName(fn)] = append(reachers[funcName(fn)], fset.Position(call.Pos()).String())
		case "reach":
			callers[funcName(fn)] = true
		}
	})
	require.Len(t, reachers, 1, "exactly one function calls a provider's Attach/Create for a session: %v", reachers)
	require.Contains(t, reachers, "Service.reach", "it is the lease's reach (lease.go): %v", reachers)
	require.Equal(t, map[string]bool{"Lease.renew": true}, callers, "reach is called by the lease only")
}
