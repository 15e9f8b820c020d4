package gateway_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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

// TestImportRules enforces the dependency rules (6 on tests too, the others on packages) of
// ../../ARCHITECTURE (every import points down) over `go list -json ./...`:
//  1. internal/config is imported only by cmd/…, internal/gateway/…, internal/auth and
//     internal/principal;
//  2. internal/api, internal/mcp and internal/e2bdoor (the edges) import none of each other,
//     store, broker, config or anything under internal/providers: the domain hands them its
//     own views (the E2B door shares E2B's wire shapes, internal/providers/e2b/wire, with
//     the e2b provider, not its code);
//  3. internal/sandbox imports no config, pgx, net/http, queue transport or backend;
//  4. internal/broker never imports sandbox or providers;
//  5. provider backends never import config, store or principal;
//  6. only internal/gateway (and its gatewaytest) assembles a gateway: no other package
//     imports internal/api, and only internal/gateway imports internal/mcp and internal/e2bdoor;
//  7. pkg/… (the public Go client) and the user CLI cmd/sandgate, built on it, import nothing
//     under internal/: what they do, any program outside this module can do;
//  8. only internal/gateway opens the Postgres store (internal/store/postgres): cmd/ and
//     bench/ go through it (bench/ seeds and reads its database through gatewaytest, and
//     TestBenchKeepsOutOfTheStore holds it to writing no SQL of its own against the store's
//     tables), the broker and the domain take store interfaces. Test support
//     (internal/testutil: pgtest builds a Postgres store for tests) is the exception;
//  9. the store seam (internal/store, its memory store and its storetest conformance suite)
//     imports neither the domain, the broker, a provider, the Postgres store nor pgx: the
//     interface names no database, and the suite holds every backend to the same behaviour;
//  10. internal/config knows no provider: it imports no package under internal/providers (nor
//     internal/gateway, which maps the blocks it keeps raw onto the registry's backends), so
//     adding a provider needs no edit there.
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
		{2, is("internal/api"), is("internal/mcp", "internal/e2bdoor", "internal/store", "internal/broker", "internal/config", "internal/providers")},
		{2, is("internal/mcp"), is("internal/api", "internal/e2bdoor", "internal/store", "internal/broker", "internal/config", "internal/providers")},
		{2, is("internal/e2bdoor"), func(i string) bool {
			return under(i, "internal/api", "internal/mcp", "internal/store", "internal/broker", "internal/config", "internal/providers") &&
				!under(i, "internal/providers/e2b/wire")
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
		{8, func(p string) bool {
			return !under(p, "internal/gateway", "internal/store/postgres", "internal/testutil")
		}, is("internal/store/postgres")},
		{9, func(p string) bool { return under(p, "internal/store") && !under(p, "internal/store/postgres") },
			is("internal/sandbox", "internal/broker", "internal/providers", "internal/store/postgres", "github.com/jackc/pgx/v5")},
		{10, func(p string) bool { return p == "internal/config" }, is("internal/providers", "internal/gateway")},
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
					broken = append(broken, edge+" (rule "+strconv.Itoa(r.n)+")")
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

// TestBenchKeepsOutOfTheStore: bench/ reads and writes Sandgate's tables only through the
// gateway and its harness (gatewaytest.SeedListing, Installation, Sandboxes), never with SQL
// of its own (rule 8, for what imports do not show: the bench uses pgx to create its
// database and to measure Postgres itself). A statement naming a table of /migrations fails.
func TestBenchKeepsOutOfTheStore(t *testing.T) {
	root := filepath.Join("..", "..")
	migrations, err := filepath.Glob(filepath.Join(root, "migrations", "*.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, migrations)
	create := regexp.MustCompile(`(?i)\bcreate\s+table\s+(?:if\s+not\s+exists\s+)?([a-z_][a-z0-9_]*)`)
	var tables []string
	for _, m := range migrations {
		b, err := os.ReadFile(m)
		require.NoError(t, err)
		for _, c := range create.FindAllStringSubmatch(string(b), -1) {
			tables = append(tables, regexp.QuoteMeta(strings.ToLower(c[1])))
		}
	}
	require.Contains(t, tables, "sessions", "the tables of /migrations")
	statement := regexp.MustCompile(`(?i)\b(?:from|into|update|join|table|analyze)\s+(?:` + strings.Join(tables, "|") + `)\b`)
	sources, err := filepath.Glob(filepath.Join(root, "bench", "*.go"))
	require.NoError(t, err)
	require.NotEmpty(t, sources)
	var found []string
	for _, path := range sources {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		for n, line := range strings.Split(string(b), "\n") {
			if statement.MatchString(line) {
				rel, _ := filepath.Rel(root, path)
				found = append(found, rel+":"+strconv.Itoa(n+1)+": "+strings.TrimSpace(line))
			}
		}
	}
	require.Empty(t, found, "bench/ goes through internal/gateway or gatewaytest for the store's rows")
}
