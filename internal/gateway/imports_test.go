package gateway_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/sandgate/sandgate/"

// pkg is the part of `go list -json` this test reads.
type pkg struct {
	ImportPath   string
	Dir          string
	GoFiles      []string
	TestGoFiles  []string
	XTestGoFiles []string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	require.NoError(t, err)
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		require.NoError(t, dec.Decode(&p))
		p.ImportPath = strings.TrimPrefix(p.ImportPath, module)
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func trim(imports []string) []string {
	out := make([]string, 0, len(imports))
	for _, i := range imports {
		out = append(out, strings.TrimPrefix(i, module))
	}
	return out
}

func under(path string, prefixes ...string) bool {
	for _, p := range prefixes {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

var backends = []string{"internal/providers/local", "internal/providers/docker", "internal/providers/kubernetes", "internal/providers/ec2ssm", "internal/providers/daytona", "internal/providers/e2b"}

// pending lists the edges that break a rule today and are still to be moved (the
// composition-root work, step by step). The list may only shrink: a new edge that breaks a
// rule fails the test, and so does an entry here that no longer exists.
var pending = map[string]bool{}

// TestImportRules enforces the dependency rules (1–5 on packages, 6 on tests too) of ../../ARCHITECTURE (every import points
// down) over `go list -json ./...`:
//  1. internal/config is imported only by cmd/…, internal/gateway/…, internal/auth and
//     internal/principal;
//  2. internal/api, internal/mcp and internal/e2bdoor (the edges) import none of each other,
//     store, broker, config or a provider backend (the door shares E2B's wire shapes,
//     internal/providers/e2b/wire, with the e2b provider, not its code);
//  3. internal/sandbox imports no config, pgx, net/http, queue transport or backend;
//  4. internal/broker never imports sandbox or providers;
//  5. provider backends never import config, store or principal;
//  6. only internal/gateway (and its gatewaytest) assembles a gateway: no other package
//     imports internal/api, and only internal/gateway imports internal/mcp and internal/e2bdoor;
//  7. pkg/… (the public Go client) and the user CLI cmd/sandgate, built on it, import nothing
//     under internal/: what they do, any program outside this module can do.
func TestImportRules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	type rule struct {
		n      int
		from   func(string) bool
		banned func(string) bool
	}
	is := func(paths ...string) func(string) bool {
		return func(p string) bool { return under(p, paths...) }
	}
	rules := []rule{
		{1, func(p string) bool {
			return !under(p, "cmd", "internal/gateway", "internal/auth", "internal/principal", "internal/config", "bench", "tools")
		}, is("internal/config")},
		{2, is("internal/api"), is("internal/mcp", "internal/e2bdoor", "internal/store", "internal/broker", "internal/config", "internal/providers/local", "internal/providers/docker", "internal/providers/kubernetes", "internal/providers/ec2ssm", "internal/providers/daytona", "internal/providers/e2b")},
		{2, is("internal/mcp"), is("internal/api", "internal/e2bdoor", "internal/store", "internal/broker", "internal/config", "internal/providers/local", "internal/providers/docker", "internal/providers/kubernetes", "internal/providers/ec2ssm", "internal/providers/daytona", "internal/providers/e2b")},
		{2, is("internal/e2bdoor"), func(i string) bool {
			return under(i, "internal/api", "internal/mcp", "internal/store", "internal/broker", "internal/config") ||
				under(i, backends...) && !under(i, "internal/providers/e2b/wire")
		}},
		{3, is("internal/sandbox"), func(i string) bool {
			return under(i, "internal/config", "github.com/jackc/pgx/v5", "net/http", "internal/broker/queue") || under(i, backends...)
		}},
		{4, is("internal/broker"), is("internal/sandbox", "internal/providers")},
		{5, is(backends...), is("internal/config", "internal/store", "internal/principal")},
		{6, func(p string) bool { return !under(p, "internal/gateway", "internal/api") }, is("internal/api")},
		{6, func(p string) bool { return !under(p, "internal/gateway", "internal/mcp") }, is("internal/mcp")},
		{6, func(p string) bool { return !under(p, "internal/gateway", "internal/e2bdoor") }, is("internal/e2bdoor")},
		{7, is("pkg", "cmd/sandgate"), is("internal")},
	}
	seen := map[string]bool{}
	var broken []string
	for _, p := range listPackages(t) {
		for _, set := range []struct {
			tag     string
			imports []string
		}{{"", p.Imports}, {" [test]", append(slices.Clone(p.TestImports), p.XTestImports...)}} {
			for _, imp := range trim(set.imports) {
				edge := p.ImportPath + set.tag + " -> " + imp
				for _, r := range rules {
					if set.tag != "" && r.n != 6 {
						continue // tests may configure profiles and reach for fixtures
					}
					if !r.from(p.ImportPath) || !r.banned(imp) || under(imp, p.ImportPath) {
						continue
					}
					if pending[edge] {
						seen[edge] = true
						continue
					}
					broken = append(broken, edge+" (rule "+string(rune('0'+r.n))+")")
				}
			}
		}
	}
	slices.Sort(broken)
	broken = slices.Compact(broken)
	require.Empty(t, broken, "imports that break the dependency rules")
	for edge := range pending {
		require.True(t, seen[edge], "%q no longer exists: remove it from pending", edge)
	}
}

// TestOneAssembly: only internal/gateway calls sandbox.New and api.NewHandler (rule 6, for the
// calls imports do not show); sandboxtest assembles the domain alone, for domain tests.
func TestOneAssembly(t *testing.T) {
	root := filepath.Join("..", "..")
	var found []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".sandgate")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if under(filepath.ToSlash(filepath.Dir(rel)), "internal/gateway", "internal/sandbox/sandboxtest") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			if strings.Contains(sc.Text(), "sandbox.New(") || strings.Contains(sc.Text(), "api.NewHandler(") {
				found = append(found, rel+":"+strings.TrimSpace(sc.Text()))
			}
		}
		return sc.Err()
	})
	require.NoError(t, err)
	require.Empty(t, found, "gateways are assembled only by internal/gateway (tests: gatewaytest; the domain alone: sandboxtest)")
}
