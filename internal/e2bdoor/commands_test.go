package e2bdoor_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCommandsWithTheOfficialSDK drives envd's process service through the door with E2B's
// JavaScript SDK on docker sandboxes: a foreground command streams its output to the
// callbacks as it comes, gets the session's environment and its own, runs in the folder
// given (E2B's /home/user is the workspace), fails with CommandExitError; stdin is fed and
// closed; a background command is listed with its argv and a kill ends its whole tree; a
// second handle follows a running command from then on; a terminal takes input and a resize;
// another user and a command past its timeout are refused with the SDK's errors.
func TestCommandsWithTheOfficialSDK(t *testing.T) {
	t.Parallel()
	d := dockerDoor(t, nil)
	_, key := d.key("alice", nil, nil)
	var got struct {
		SandboxID string `json:"sandboxId"`
		Command   struct {
			Stdout, Stderr string
			ExitCode       int
			Streamed       [][2]string
		}
		Streaming        string
		Cwd, RelativeCwd string
		Failing          struct {
			Thrown   bool
			ExitCode int
			Stdout   string
		}
		Stdin struct {
			Stdout   string
			ExitCode int
		}
		NoStdin attempt[any]
		Listed  []struct {
			Cmd  string
			Args []string
		}
		Killed          bool
		TreeEnd         attempt[any]
		TreeLeft        string
		ListedAfterKill bool
		KillAgain       bool
		Connect         struct {
			Starter, Follower string
			ExitCode          int
		}
		Pty struct {
			Screen    string
			ExitCode  int
			Killed    bool
			KilledEnd attempt[any]
		}
		Root, TimedOut attempt[any]
	}
	d.sdk(key, "commands", &got)

	assert.Equal(t, "hello yes extra\nsecond\n", got.Command.Stdout, "the session's environment and the command's own")
	assert.Equal(t, "warn\n", got.Command.Stderr)
	assert.Equal(t, 0, got.Command.ExitCode)
	var streamedOut, streamedErr strings.Builder
	for _, c := range got.Command.Streamed {
		if c[0] == "stdout" {
			streamedOut.WriteString(c[1])
		} else {
			streamedErr.WriteString(c[1])
		}
	}
	assert.Equal(t, got.Command.Stdout, streamedOut.String(), "the callbacks saw the whole output")
	assert.Equal(t, got.Command.Stderr, streamedErr.String())
	assert.Equal(t, "first?\ngot streamed\n", got.Streaming, "the callback saw the first line while the command waited for its answer")

	assert.Equal(t, "/workspace/sub/deeper", got.Cwd, "E2B's /home/user is the workspace")
	assert.Equal(t, "/workspace/sub", got.RelativeCwd)
	assert.True(t, got.Failing.Thrown, "a non-zero exit is a CommandExitError")
	assert.Equal(t, 3, got.Failing.ExitCode)
	assert.Equal(t, "partial\n", got.Failing.Stdout)
	assert.Equal(t, "fed through stdin\n", got.Stdin.Stdout)
	assert.Equal(t, 0, got.Stdin.ExitCode)
	require.NotNil(t, got.NoStdin.Thrown, "stdin is closed unless asked for")

	require.Len(t, got.Listed, 1)
	assert.Equal(t, "/bin/bash", got.Listed[0].Cmd)
	assert.Equal(t, []string{"-l", "-c", "sleep 600 & sleep 601 & wait"}, got.Listed[0].Args, "the argv as E2B gave it")
	assert.True(t, got.Killed)
	require.NotNil(t, got.TreeEnd.Thrown, "a killed command ends in an error")
	assert.Equal(t, "CommandExitError", got.TreeEnd.Thrown.Name)
	assert.Equal(t, "0", got.TreeLeft, "the kill ended the whole tree")
	assert.False(t, got.ListedAfterKill)
	assert.False(t, got.KillAgain, "killing an ended command finds nothing")

	assert.Equal(t, "before\nafter go\n", got.Connect.Starter, "the handle that started it saw everything")
	assert.Equal(t, "after go\n", got.Connect.Follower, "connect follows from then on, as envd")
	assert.Equal(t, 0, got.Connect.ExitCode)

	assert.Contains(t, got.Pty.Screen, "24 80")
	assert.Contains(t, got.Pty.Screen, "TERM=xterm-256color", "the SDK's environment reaches the terminal")
	assert.Contains(t, got.Pty.Screen, "30 100", "the resize reached the terminal")
	assert.Equal(t, 0, got.Pty.ExitCode)
	assert.True(t, got.Pty.Killed)
	require.NotNil(t, got.Pty.KilledEnd.Thrown)

	require.NotNil(t, got.Root.Thrown)
	assert.Equal(t, "InvalidArgumentError", got.Root.Thrown.Name)
	assert.True(t, got.Root.Thrown.has("user 'root' is not offered"), "%+v", got.Root.Thrown)
	require.NotNil(t, got.TimedOut.Thrown)
	assert.Equal(t, "TimeoutError", got.TimedOut.Thrown.Name, "%+v", got.TimedOut.Thrown)
}
