package e2bfake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers/e2b/e2bfake"
)

// sdkDir holds the node project that drives the fake with E2B's official SDKs; its
// node_modules are installed by scripts/test-setup.sh (npm ci).
var sdkDir = filepath.Join("testdata", "sdk")

// skipOrFail skips the test with reason, or fails it under CI=true, where every suite must run.
func skipOrFail(t *testing.T, reason string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: %s", reason)
	}
	t.Skip(reason)
}

// TestFidelityWithTheOfficialSDKs drives the fake with E2B's JavaScript SDKs from npm (e2b and
// @e2b/code-interpreter, pinned in testdata/sdk/package-lock.json): create, commands (output,
// exit codes, environment, stdin, kill; background commands listed, connected to, fed and
// killed), a terminal (pty.create, sendInput, resize, kill), files (write, read, list, exists, remove), stateful
// code in the default context and in a context of its own, restart and removal of a context,
// info, list, timeout, connect and kill. The SDKs reach the fake over plain HTTP on loopback
// through their own environment variables (E2B_API_URL, E2B_SANDBOX_URL, E2B_DOMAIN).
func TestFidelityWithTheOfficialSDKs(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		skipOrFail(t, "node is not installed (Node 20 runs E2B's SDKs)")
	}
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules", "@e2b", "code-interpreter")); err != nil {
		skipOrFail(t, "E2B's SDKs are not installed: run scripts/test-setup.sh (npm ci in "+sdkDir+")")
	}
	fake := e2bfake.New(t, e2bfake.Options{})

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "fidelity.mjs")
	cmd.Dir = sdkDir
	cmd.Env = append(os.Environ(),
		"E2B_API_URL="+fake.API, "E2B_SANDBOX_URL="+fake.Sandboxes, "E2B_DOMAIN="+fake.Domain,
		"E2B_API_KEY="+fake.APIKey, "E2B_DEBUG=false",
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "fidelity.mjs failed: %s", stderr.String())

	var got struct {
		SandboxID string `json:"sandboxId"`
		Command   struct {
			Stdout, Stderr string
			ExitCode       int
		}
		Failing struct {
			Thrown   bool
			ExitCode int
			Stdout   string
		}
		Stdin struct {
			Stdout   string
			ExitCode int
		}
		Killed  bool
		Sleeper struct {
			Thrown   bool
			ExitCode int
		}
		Background struct {
			Listed, Killed, ListedAfterKill, KillAgain bool
			Starter, Follower                          string
			FollowerExitCode                           int
			KilledEnd                                  struct {
				Thrown   bool
				ExitCode int
			}
		}
		Pty struct {
			Screen    string
			ExitCode  int
			Killed    bool
			KilledEnd struct {
				Thrown   bool
				ExitCode int
			}
			ResizeGone string
		}
		Read  string
		Bytes []int
		List  []struct {
			Name, Type string
			Size       int
		}
		Exists, ExistsAfterRemove bool
		FromProgram               []int
		Stateful                  struct {
			Stdout, Stderr []string
			Error          any
		}
		CodeError struct {
			Stdout       []string
			Name, Value  string
			HasTraceback bool
		}
		Contexts struct {
			Own                         []string
			IsolatedError, AfterRestart string
			Listed, ListedAfterRemove   bool
		}
		Info struct {
			TemplateID string `json:"templateId"`
			Metadata   map[string]string
			State      string
		}
		Listed           bool
		Connected        string
		Killed1, Killed2 bool
		ConnectAfterKill string
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &got), "output: %s\nstderr: %s", stdout.String(), stderr.String())

	created, ok := fake.Sandbox(got.SandboxID)
	require.True(t, ok)
	assert.True(t, created.Killed)
	assert.Equal(t, "code-interpreter-v1", created.Request.TemplateID)
	assert.Equal(t, map[string]string{"FROM_CREATE": "yes"}, created.Request.EnvVars)
	require.NotNil(t, created.Request.Network)
	require.NotNil(t, created.Request.Network.AllowPublicTraffic)
	assert.False(t, *created.Request.Network.AllowPublicTraffic, "the code interpreter answered only with the traffic token")

	assert.Equal(t, "hello yes extra\n", got.Command.Stdout)
	assert.Equal(t, "warn\n", got.Command.Stderr)
	assert.Equal(t, 0, got.Command.ExitCode)
	assert.True(t, got.Failing.Thrown, "a non-zero exit is a CommandExitError")
	assert.Equal(t, 3, got.Failing.ExitCode)
	assert.Equal(t, "partial\n", got.Failing.Stdout)
	assert.Equal(t, "fed through stdin\n", got.Stdin.Stdout)
	assert.Equal(t, 0, got.Stdin.ExitCode)
	assert.True(t, got.Killed)
	assert.True(t, got.Sleeper.Thrown, "a killed command ends in an error")
	assert.Equal(t, -1, got.Sleeper.ExitCode, "envd reports a process killed by a signal with exit code -1")

	bg := got.Background
	assert.True(t, bg.Listed, "commands.list shows the running background command")
	assert.Equal(t, "before\nafter go\n", bg.Starter, "the handle that started it saw everything")
	assert.Equal(t, "after go\n", bg.Follower, "commands.connect gets what the command writes from then on")
	assert.Equal(t, 0, bg.FollowerExitCode)
	assert.True(t, bg.Killed)
	assert.True(t, bg.KilledEnd.Thrown, "a killed command ends in an error")
	assert.Equal(t, -1, bg.KilledEnd.ExitCode)
	assert.False(t, bg.ListedAfterKill, "an ended command is not listed")
	assert.False(t, bg.KillAgain, "killing an ended command finds nothing (404)")

	pty := got.Pty
	assert.Contains(t, pty.Screen, "24 80")
	assert.Contains(t, pty.Screen, "TERM=xterm-256color", "the SDK sets TERM")
	assert.Contains(t, pty.Screen, "30 100", "the resize reached the terminal")
	assert.Contains(t, pty.Screen, "\r\n", "a terminal ends lines with CR LF")
	assert.Equal(t, 0, pty.ExitCode)
	assert.True(t, pty.Killed)
	assert.True(t, pty.KilledEnd.Thrown)
	assert.Equal(t, -1, pty.KilledEnd.ExitCode)
	assert.Equal(t, "NotFoundError", pty.ResizeGone, "resizing an ended terminal finds nothing")

	assert.Equal(t, "written by the SDK\n", got.Read)
	assert.Equal(t, []int{0, 1, 2, 255}, got.Bytes)
	require.Len(t, got.List, 2)
	assert.Equal(t, "bytes.bin", got.List[0].Name)
	assert.Equal(t, "file", got.List[0].Type)
	assert.Equal(t, 4, got.List[0].Size)
	assert.True(t, got.Exists)
	assert.False(t, got.ExistsAfterRemove)
	assert.Equal(t, []int{0, 1, 2, 255}, got.FromProgram, "programs see the bytes the SDK wrote")

	// The SDK gives the output as the chunks that arrived (print may write the text and its
	// line end apart): only their concatenation is the program's output.
	assert.Equal(t, "42\n", strings.Join(got.Stateful.Stdout, ""), "a variable set by one runCode is there in the next")
	assert.Empty(t, got.Stateful.Stderr)
	assert.Nil(t, got.Stateful.Error)
	assert.Equal(t, "before\n", strings.Join(got.CodeError.Stdout, ""))
	assert.Equal(t, "NameError", got.CodeError.Name)
	assert.Equal(t, "name 'undefined_name' is not defined", got.CodeError.Value)
	assert.True(t, got.CodeError.HasTraceback)
	assert.Equal(t, "own context\n", strings.Join(got.Contexts.Own, ""))
	assert.Equal(t, "NameError", got.Contexts.IsolatedError, "contexts do not share state")
	assert.True(t, got.Contexts.Listed)
	assert.Equal(t, "NameError", got.Contexts.AfterRestart, "a restart clears the state")
	assert.False(t, got.Contexts.ListedAfterRemove)

	assert.Equal(t, "code-interpreter-v1", got.Info.TemplateID)
	assert.Equal(t, map[string]string{"suite": "fidelity"}, got.Info.Metadata)
	assert.Equal(t, "running", got.Info.State)
	assert.True(t, got.Listed)
	assert.Equal(t, "4", got.Connected)
	assert.True(t, got.Killed1)
	assert.False(t, got.Killed2, "killing a killed sandbox reports false (404)")
	assert.NotEqual(t, "connected", got.ConnectAfterKill)
}
