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

// selectors visits every selector (x.Name, called or taken as a value) in files with the
// function declaration it is written in.
func selectors(files map[string]*ast.File, visit func(fn *ast.FuncDecl, sel *ast.SelectorExpr)) {
	for _, f := range files {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					visit(fn, sel)
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
// provider's Attach or Create for a session (lease.go's reachSandbox), and only the lease calls it.
// An operation that needs a session's sandbox takes a lease (leases.lease) instead of
// writing the sequence again.
func TestOneLease(t *testing.T) {
	fset, files := domainFiles(t)
	reachers := map[string][]string{} // function → where it names Attach/Create
	callers := map[string]bool{}      // functions naming reachSandbox
	selectors(files, func(fn *ast.FuncDecl, sel *ast.SelectorExpr) {
		switch sel.Sel.Name {
		case "Attach", "Create":
			reachers[funcName(fn)] = append(reachers[funcName(fn)], fset.Position(sel.Pos()).String())
		case "reachSandbox":
			callers[funcName(fn)] = true
		}
	})
	require.Len(t, reachers, 1, "exactly one function calls a provider's Attach/Create for a session: %v", reachers)
	require.Contains(t, reachers, "leases.reachSandbox", "it is the lease's reachSandbox (lease.go): %v", reachers)
	require.Equal(t, map[string]bool{"Lease.renew": true}, callers, "reachSandbox is called by the lease only")
}

// TestOneClock pins issue 34's "the injected clock everywhere in the domain": no non-test
// code of the domain reads the wall clock or waits on the runtime's timers but
// clock.System (clock/clock.go), the production Clock. Timestamps, durations, timeouts, polls,
// retries and sweeps go through Service.clock, so a test's manual clock (sandboxtest.Clock)
// governs all of them.
func TestOneClock(t *testing.T) {
	fset, files := domainFiles(t)
	banned := map[string]bool{"Now": true, "Since": true, "Until": true, "After": true, "Sleep": true, "Tick": true,
		"NewTimer": true, "NewTicker": true, "AfterFunc": true}
	var found []string
	for path, f := range files {
		timeName := ""
		for _, im := range f.Imports {
			if im.Path.Value == `"time"` {
				timeName = "time"
				if im.Name != nil {
					timeName = im.Name.Name
				}
			}
		}
		if timeName == "" {
			continue
		}
		for _, decl := range f.Decls {
			fn, isFunc := decl.(*ast.FuncDecl)
			if isFunc && strings.HasPrefix(funcName(fn), "System.") && filepath.ToSlash(path) == "clock/clock.go" {
				continue // the production clock itself
			}
			ast.Inspect(decl, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == timeName && banned[sel.Sel.Name] {
					found = append(found, fset.Position(sel.Pos()).String()+": time."+sel.Sel.Name)
				}
				return true
			})
		}
	}
	require.Empty(t, found, "the domain tells time and waits through its Clock (internal/sandbox/clock)")
}

// TestOneTurn pins issue 34's "one ordering mechanism": an execution waits for the place it
// took at submission, or a delivered one takes its place, only in the lease's takeTurn
// (lease.go) — the function through which file operations take theirs too.
func TestOneTurn(t *testing.T) {
	_, files := domainFiles(t)
	callers := map[string]map[string]bool{} // store method → functions naming it
	selectors(files, func(fn *ast.FuncDecl, sel *ast.SelectorExpr) {
		switch sel.Sel.Name {
		case "AwaitTurn", "StartTaskInSession":
			if callers[sel.Sel.Name] == nil {
				callers[sel.Sel.Name] = map[string]bool{}
			}
			callers[sel.Sel.Name][funcName(fn)] = true
		}
	})
	one := map[string]bool{"leases.takeTurn": true}
	require.Equal(t, map[string]map[string]bool{"AwaitTurn": one, "StartTaskInSession": one}, callers)
}
