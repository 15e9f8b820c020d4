package mcp_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/mcp"
)

// sdkJS is the Node project that drives /mcp with the official TypeScript SDK;
// scripts/test-setup.sh installs its node_modules (npm ci).
const sdkJS = "testdata/sdk-js"

// requireSDKJS skips (fails under CI=true) without Node or the SDK's node_modules.
func requireSDKJS(t *testing.T) {
	t.Helper()
	why := ""
	if _, err := exec.LookPath("node"); err != nil {
		why = "node is not installed (apt-get install nodejs)"
	} else if _, err := os.Stat(filepath.Join(sdkJS, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		why = "the MCP TypeScript SDK is not installed: npm ci --prefix internal/mcp/" + sdkJS + " (scripts/test-setup.sh does it)"
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// TestLongCommandsWithTheTypeScriptSDK: a command of about 90 s, called as agents using the
// official TypeScript SDK call it (its default request timeout is 60 s). With wait_s and
// resetTimeoutOnProgress the call itself returns the result, kept alive by progress
// notifications; by default it answers in time with a task_id that check_sandbox_task
// collects. Seconds run concurrently, so the test takes about 90 s.
func TestLongCommandsWithTheTypeScriptSDK(t *testing.T) {
	requireSDKJS(t)
	t.Parallel()
	g := newGateway(t, nil)
	cmd := exec.CommandContext(t.Context(), "node", "long_calls.mjs", g.URL+mcp.Path, g.token("alice"), "90")
	cmd.Dir = sdkJS
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node: %s", stderr.String())

	var got struct {
		Direct    map[string]any `json:"direct"`
		Progress  int            `json:"progress"`
		Promoted  map[string]any `json:"promoted"`
		Collected map[string]any `json:"collected"`
	}
	require.NoError(t, json.Unmarshal(out, &got), "%s", out)
	assert.Equal(t, "done after 90\n", got.Direct["stdout"], "the call with wait_s returned the result itself: %v", got.Direct)
	assert.Equal(t, 0.0, got.Direct["exit_code"])
	assert.GreaterOrEqual(t, got.Progress, 12, "progress every 5 s kept the SDK's timeout from firing")
	assert.Equal(t, "pending", got.Promoted["status"], "without wait_s the call answered in time with a task: %v", got.Promoted)
	require.NotEmpty(t, got.Promoted["task_id"])
	result, _ := got.Collected["result"].(map[string]any)
	require.NotNil(t, result, "check_sandbox_task collected it: %v", got.Collected)
	assert.Equal(t, "done after 90\n", result["stdout"])
}

// TestOutputSchemasWithTheTypeScriptSDK: the official TypeScript SDK lists the tools (with
// their annotations) and calls each, checking every structured result — errors included —
// against the tool's output schema, as it does for any agent.
func TestOutputSchemasWithTheTypeScriptSDK(t *testing.T) {
	requireSDKJS(t)
	t.Parallel()
	g := newGateway(t, func(c *config.Config) { only(c, "default") })
	cmd := exec.CommandContext(t.Context(), "node", "outputs.mjs", g.URL+mcp.Path, g.token("alice"))
	cmd.Dir = sdkJS
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node (a result that does not match its output schema fails the call): %s", stderr.String())

	var got struct {
		Annotations map[string]map[string]any `json:"annotations"`
		Results     map[string]map[string]any `json:"results"`
	}
	require.NoError(t, json.Unmarshal(out, &got), "%s", out)
	require.Len(t, got.Annotations, len(mcp.ToolNames()))
	for name, a := range got.Annotations {
		assert.Equal(t, true, a["hasOutputSchema"], name)
		assert.NotEmpty(t, a["title"], name)
	}
	assert.Equal(t, true, got.Annotations["read_sandbox_file"]["readOnlyHint"])
	assert.Equal(t, true, got.Annotations["destroy_sandbox_session"]["destructiveHint"])
	r := got.Results
	assert.Equal(t, 3.0, r["run_command"]["exit_code"])
	assert.Equal(t, true, r["run_code"]["truncated"])
	assert.Equal(t, "pending", r["promoted"]["status"])
	assert.Equal(t, "text", r["read_text"]["content"])
	assert.Equal(t, "base64", r["read_binary"]["encoding"])
	assert.Equal(t, true, r["read_missing"]["isError"])
	assert.Equal(t, "unknown", r["check_unknown"]["status"])
	assert.Equal(t, "cancelled", r["check"]["status"])
	assert.Equal(t, true, r["bad_args"]["isError"])
	assert.Equal(t, true, r["destroy"]["destroyed"])
}

// TestChartsWithTheTypeScriptSDK: code that draws a chart gives the agent, through the
// official TypeScript SDK, an image content item with the chart as a PNG after the JSON
// text, which lists the results (the chart and the last expression's value).
func TestChartsWithTheTypeScriptSDK(t *testing.T) {
	requireSDKJS(t)
	requirePythonModules(t, "matplotlib")
	t.Parallel()
	g := newGateway(t, func(c *config.Config) {
		only(c, "default")
		p := c.Sandbox.Profiles["default"]
		p.Stateful = true // rich results come from code in a context
		c.Sandbox.Profiles["default"] = p
	})
	cmd := exec.CommandContext(t.Context(), "node", "rich_results.mjs", g.URL+mcp.Path, g.token("alice"))
	cmd.Dir = sdkJS
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node (a result that does not match its output schema fails the call): %s", stderr.String())

	var got struct {
		Content []struct {
			Type     string `json:"type"`
			MIMEType string `json:"mimeType"`
			Data     string `json:"data"`
			Text     string `json:"text"`
		} `json:"content"`
		Structured map[string]any `json:"structured"`
		IsError    bool           `json:"isError"`
	}
	require.NoError(t, json.Unmarshal(out, &got), "%s", out)
	require.False(t, got.IsError, "%s", out)
	require.Len(t, got.Content, 2, "the JSON text, then the chart")
	assert.Equal(t, "text", got.Content[0].Type)
	img := got.Content[1]
	assert.Equal(t, "image", img.Type)
	assert.Equal(t, "image/png", img.MIMEType)
	data, err := base64.StdEncoding.DecodeString(img.Data)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")), "a PNG signature")
	cfg, err := png.DecodeConfig(bytes.NewReader(data))
	require.NoError(t, err)
	assert.Greater(t, cfg.Width, cfg.Height, "a 4x3 figure: %dx%d", cfg.Width, cfg.Height)
	_, err = png.Decode(bytes.NewReader(data))
	require.NoError(t, err, "the whole PNG decodes")

	results, _ := got.Structured["results"].([]any)
	require.Len(t, results, 2, "%v", got.Structured)
	chart := results[0].(map[string]any)
	assert.Equal(t, "image/png", chart["image"])
	assert.Equal(t, []any{"image/png", "text/plain"}, chart["types"])
	assert.Contains(t, chart["text"], "<Figure size 400x300")
	assert.Equal(t, map[string]any{"is_main_result": true, "types": []any{"text/plain"}, "text": "42"}, results[1])
}

// requirePythonModules skips the test when python3 (the local provider's) cannot import the
// modules; under CI=true it fails (scripts/test-setup.sh installs them).
func requirePythonModules(t *testing.T, modules ...string) {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import "+strings.Join(modules, ", ")).CombinedOutput()
	if err == nil {
		return
	}
	msg := "python3 cannot import " + strings.Join(modules, ", ") + " (Debian: apt-get install python3-matplotlib; scripts/test-setup.sh does): " + strings.TrimSpace(string(out))
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
