package daytonafake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers/daytona/daytonafake"
)

// sdkProject is the small node project holding Daytona's official TypeScript SDK
// (@daytonaio/sdk, pinned in its package-lock.json); scripts/test-setup.sh installs its
// node_modules.
const sdkProject = "testdata/sdk"

// requireSDK returns the node binary, or skips (fails under CI=true) when node or the
// project's node_modules are missing.
func requireSDK(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	missing := ""
	switch {
	case err != nil:
		missing = "node is not installed (apt-get install nodejs)"
	default:
		if _, err := os.Stat(filepath.Join(sdkProject, "node_modules", "@daytonaio", "sdk", "package.json")); err != nil {
			missing = "the Daytona SDK is not installed in " + sdkProject + " (scripts/test-setup.sh runs npm ci there)"
		}
	}
	if missing == "" {
		return node
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s, and CI=true requires the SDK fidelity test", missing)
	}
	t.Skip(missing)
	return ""
}

// TestOfficialSDK drives the fake with Daytona's own TypeScript SDK: what the SDK sends must
// be understood, and what the fake answers must be what the SDK expects.
func TestOfficialSDK(t *testing.T) {
	node := requireSDK(t)
	fake := daytonafake.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "fidelity.mjs")
	cmd.Dir = sdkProject
	cmd.Env = append(os.Environ(), "DAYTONA_FAKE_API_URL="+fake.URL, "DAYTONA_FAKE_API_KEY="+fake.APIKey, "DAYTONA_API_KEY=", "DAYTONA_API_URL=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())

	var seen map[string]any
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &seen), "stdout: %s\nstderr: %s", stdout.String(), stderr.String())
	t.Logf("the SDK saw: %s", stdout.String())
	get := func(path ...string) any {
		var v any = seen
		for _, p := range path {
			m, ok := v.(map[string]any)
			require.True(t, ok, "%v: not an object in %v", path, v)
			v = m[p]
		}
		return v
	}

	assert.Equal(t, "started", get("created", "state"))
	assert.Equal(t, fake.ToolboxURL, get("created", "toolbox"))
	assert.Equal(t, map[string]any{"exitCode": 0.0, "result": "hello sdk\n"}, get("command"))
	assert.Equal(t, map[string]any{"exitCode": 3.0, "result": "bye\n"}, get("commandExit"))
	assert.Equal(t, "hello from env\n", get("env"))
	assert.NotEmpty(t, get("workDir"))

	assert.Equal(t, "first file\n", get("files", "text"))
	assert.Equal(t, []any{0.0, 1.0, 2.0, 255.0}, get("files", "bytes"))
	assert.Equal(t, []any{
		map[string]any{"name": "bytes.bin", "size": 4.0, "isDir": false},
		map[string]any{"name": "hello.txt", "size": 11.0, "isDir": false},
	}, get("files", "list"))
	assert.Equal(t, 11.0, get("files", "size"))
	assert.Equal(t, []any{"hello.txt"}, get("files", "after"))
	assert.Contains(t, get("files", "missing"), "Error")

	assert.Equal(t, map[string]any{"exitCode": 0.0, "result": "42 hello from env\n"}, get("codeRun"))

	assert.Equal(t, map[string]any{"exitCode": 0.0, "stdout": "out\n", "stderr": "err\n"}, get("session", "first"))
	assert.Equal(t, map[string]any{"exitCode": 0.0, "stdout": "42 docs\n"}, get("session", "second"))
	assert.Equal(t, map[string]any{
		"streamedOut": "line 1\nline 2\nline 3\n", "streamedErr": "oops\n", "exitCode": 5.0,
		"stdout": "line 1\nline 2\nline 3\n", "stderr": "oops\n",
	}, get("session", "async"))

	assert.Equal(t, "", get("interpreter", "first"))
	assert.Equal(t, map[string]any{"stdout": "42\n", "stderr": "to err\n"}, get("interpreter", "second"))
	assert.Equal(t, "ZeroDivisionError", get("interpreter", "error", "name"))
	assert.Contains(t, get("interpreter", "error", "traceback"), "Traceback")
	assert.Equal(t, true, get("interpreter", "listed"))
	assert.Equal(t, "default context\n", get("interpreter", "default"))

	assert.Equal(t, map[string]any{"state": "started", "cpu": 2.0, "memory": 4.0, "result": "built\n"}, get("fromImage"))
	assert.Equal(t, []any{get("created", "id")}, get("list"))
	assert.Equal(t, "DaytonaNotFoundError", get("delete"))
	assert.Empty(t, fake.Sandboxes(), "every sandbox was deleted")

	creates := fake.Creates()
	require.Len(t, creates, 2)
	assert.Equal(t, "python", creates[0].Labels["code-toolbox-language"])
	assert.Equal(t, "us", creates[0].Target)
	require.NotNil(t, creates[1].BuildInfo)
	assert.Contains(t, creates[1].BuildInfo.DockerfileContent, "FROM python:3.12-slim")
}
