package api_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	sandgate "github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/internal/api/apigen"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// TestContractIsValid: openapi.yaml is OpenAPI 3.1 that kin-openapi's Validate accepts, and
// the spec embedded in the strict server (what the request validator uses) names every
// operation as the file does (but those tagged preview, which the config excludes: the proxy
// is a plain handler, see preview.go).
func TestContractIsValid(t *testing.T) {
	t.Parallel()
	c := gatewaytest.LoadContract(t) // loads and Validates
	require.Equal(t, "3.1.0", c.Doc.OpenAPI)
	embedded, err := apigen.GetSpec()
	require.NoError(t, err)
	require.NoError(t, embedded.Validate(t.Context()))
	ids := 0
	for path, item := range c.Doc.Paths.Map() {
		for method, op := range item.Operations() {
			require.NotNil(t, op.Responses.Status(500), "%s declares 500", op.OperationID)
			ids++
			if slices.Contains(op.Tags, "preview") {
				continue
			}
			other := embedded.Paths.Value(path)
			require.NotNil(t, other, path)
			require.NotNil(t, other.GetOperation(method), "%s %s", method, path)
			require.Equal(t, op.OperationID, other.GetOperation(method).OperationID, "%s %s", method, path)
		}
	}
	require.Greater(t, ids, 25)
}

// TestContractRenderingsAgree: /openapi.json and /openapi.yaml are one document.
func TestContractRenderingsAgree(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	y := e.do("", "GET", "/openapi.yaml", nil)
	require.Equal(t, 200, y.Status)
	require.Equal(t, sandgate.OpenAPI, y.Body)
	j := e.do("", "GET", "/openapi.json", nil)
	require.Equal(t, 200, j.Status)
	require.Equal(t, "application/json", j.Header.Get("Content-Type"))
	var fromJSON, fromYAML any
	require.NoError(t, json.Unmarshal(j.Body, &fromJSON))
	yj, err := yaml.YAMLToJSON(y.Body)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(yj, &fromYAML))
	require.Equal(t, fromYAML, fromJSON)
	assert.Contains(t, string(j.Body), `"operationId": "getMe"`)
	assert.Less(t, strings.Index(string(j.Body), `"/healthz"`), strings.Index(string(j.Body), `"/v1/me"`), "the file's order is kept")
}

// TestDeclaredErrorAnswers provokes the error answers the contract declares beyond the
// everyday ones — 403 for ?all=true, 409, 413 on a JSON operation, 416, 422, 429, 502 — and
// checks each against it (testEnv.send does, for every answer).
func TestDeclaredErrorAnswers(t *testing.T) {
	t.Parallel()
	brokenDir := filepath.Join(t.TempDir(), "broken")
	require.NoError(t, os.Mkdir(brokenDir, 0o700))
	e := newEnv(t, envOpts{config: func(c *config.Config) {
		c.Server.MaxBodyBytes = 4096
		c.Sandbox.Quotas.RequestsPerSecond = 0.001
		c.Sandbox.Quotas.RequestsBurst = 40
		c.Sandbox.Profiles["broken"] = config.Profile{Type: local.TypeName, Blocks: config.Blocks{local.TypeName: &local.Block{Workdir: brokenDir}}}
	}})
	// The provider of "broken" can no longer create a sandbox: its workdir became a file.
	require.NoError(t, os.Remove(brokenDir))
	require.NoError(t, os.WriteFile(brokenDir, nil, 0o600))
	alice := e.token("alice")

	requireProblem(t, e.do(alice, "GET", "/v1/sessions?all=true", nil), 403, "forbidden")
	requireProblem(t, e.do(alice, "POST", "/v1/sessions", map[string]any{"profile": "shared"}), 409, "conflict")
	requireProblem(t, e.do(alice, "POST", "/v1/sessions", map[string]any{"profile": "oneshot"}), 409, "conflict")
	requireProblem(t, e.do(alice, "POST", "/v1/sessions/default/commands", map[string]any{"command": strings.Repeat("x", 5000)}), 413, "too-large")
	requireProblem(t, e.do(alice, "POST", "/v1/runs", map[string]any{"profile": "oneshot", "code": "1", "language": "cobol"}), 422, "capability")
	requireProblem(t, e.do(alice, "POST", "/v1/runs", map[string]any{"profile": "oneshot", "command": "true", "code": "1"}), 400, "validation")
	requireProblem(t, e.do(alice, "POST", "/v1/runs", map[string]any{"profile": "oneshot"}), 400, "validation")
	requireProblem(t, e.do(alice, "POST", "/v1/sessions/default/commands?profile=broken", map[string]any{"command": "true"}), 502, "provision")
	id := e.newSession(alice, "default")
	require.Equal(t, 200, e.do(alice, "PUT", "/v1/sessions/"+id+"/files/a.txt", []byte("hello")).Status)
	r := e.send(alice, "GET", "/v1/sessions/"+id+"/files/a.txt", "", nil, 0, map[string]string{"Range": "bytes=10-"})
	requireProblem(t, r, 416, "range-not-satisfiable")
	require.Equal(t, "bytes */5", r.Header.Get("Content-Range"))

	// The request rate: a burst of 40, then 429 with Retry-After.
	var last reply
	for range 45 {
		if last = e.do(alice, "GET", "/v1/me", nil); last.Status == 429 {
			break
		}
	}
	requireProblem(t, last, 429, "quota")
	require.NotEmpty(t, last.Header.Get("Retry-After"))
}

// contractTools is the Node project with the linters and openapi-typescript;
// scripts/test-setup.sh installs it (npm ci).
const contractTools = "testdata/contract"

// TestContractLinters runs what scripts/lint-contract.sh runs: Redocly's linter, Spectral's
// oas ruleset (0 errors each), and openapi-typescript, whose types must compile against
// check.ts (file bodies are Blob, command xor code, problems on every operation).
func TestContractLinters(t *testing.T) {
	t.Parallel()
	why := ""
	if _, err := exec.LookPath("node"); err != nil {
		why = "node is not installed (apt-get install nodejs)"
	} else if _, err := os.Stat(filepath.Join(contractTools, "node_modules", ".bin", "redocly")); err != nil {
		why = "the contract tools are not installed: npm ci --prefix internal/api/" + contractTools + " (scripts/test-setup.sh does it)"
	}
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	spec := "../../../../openapi.yaml"
	for _, args := range [][]string{
		{"npx", "--no-install", "redocly", "lint", spec, "--format=stylish"},
		{"npx", "--no-install", "spectral", "lint", "--ruleset", ".spectral.yaml", "--fail-severity=error", spec},
		{"node", "types.mjs", spec},
		{"npx", "--no-install", "tsc", "-p", "."},
	} {
		cmd := exec.CommandContext(t.Context(), args[0], args[1:]...)
		cmd.Dir = contractTools
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s:\n%s", strings.Join(args, " "), out)
	}
}
