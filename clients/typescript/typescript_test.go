// Package typescript tests the TypeScript client (this folder's npm project) against a real
// gateway: it compiles the client and its live tests with tsc and runs them with node.
package typescript

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// requireNodeProject skips (fails under CI=true) without node or the project's node_modules,
// which scripts/test-setup.sh installs (npm ci).
func requireNodeProject(t *testing.T) {
	t.Helper()
	why := ""
	if _, err := exec.LookPath("node"); err != nil {
		why = "node is not installed (apt-get install nodejs)"
	} else if _, err := os.Stat(filepath.Join("node_modules", "openapi-fetch")); err != nil {
		why = "the client's node_modules are missing: npm ci --prefix clients/typescript (scripts/test-setup.sh does it)"
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out.String())
	return out.String()
}

// TestSchemaIsCurrent: src/schema.ts is what openapi-typescript makes of openapi.yaml now
// (regenerate with `npm run generate` after changing the contract).
func TestSchemaIsCurrent(t *testing.T) {
	requireNodeProject(t)
	out := filepath.Join(t.TempDir(), "schema.ts")
	run(t, nil, "node", "scripts/generate.mjs", "../../openapi.yaml", out)
	want, err := os.ReadFile(out)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join("src", "schema.ts"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "clients/typescript/src/schema.ts is stale: run `npm run generate` in clients/typescript and commit it")
}

// TestClientLive compiles the client (tsc, as `npm run build` does) and its tests, then
// runs test/live.test.ts with node's test runner against a real gateway: sessions,
// commands, stateful code, binary files byte-exact, task polling and cancelling, streamed
// output with resume, standard input and problems.
func TestClientLive(t *testing.T) {
	requireNodeProject(t)
	tsc := filepath.Join("node_modules", ".bin", "tsc")
	run(t, nil, tsc, "-p", "tsconfig.json", "--outDir", t.TempDir()) // the package itself builds
	outDir := t.TempDir()
	run(t, nil, tsc, "-p", "tsconfig.test.json", "--outDir", outDir)
	// node resolves the compiled tests' imports (openapi-fetch, eventsource-parser) from the
	// project's node_modules: link it beside them.
	abs, err := filepath.Abs("node_modules")
	require.NoError(t, err)
	require.NoError(t, os.Symlink(abs, filepath.Join(outDir, "node_modules")))
	require.NoError(t, os.WriteFile(filepath.Join(outDir, "package.json"), []byte(`{"type":"module"}`), 0o644))

	workdir := t.TempDir()
	env := gatewaytest.Start(t, gatewaytest.Options{Workdir: workdir, Config: func(c *config.Config) {
		lb := config.Blocks{local.TypeName: &local.Block{Workdir: workdir}}
		c.Sandbox.Profiles = map[string]config.Profile{
			"default": {Type: "local_subprocess", Stateful: true, Blocks: lb},
			"oneshot": {Type: "local_subprocess", Scope: "per_call", Blocks: lb},
		}
	}})
	out := run(t, []string{"SANDGATE_URL=" + env.URL, "SANDGATE_TOKEN=" + env.Token("ts-user")},
		"node", "--test", "--test-reporter=spec", filepath.Join(outDir, "test", "live.test.js"))
	t.Log(out)
	require.Contains(t, out, "pass 8")
	require.Contains(t, out, "fail 0")
}
