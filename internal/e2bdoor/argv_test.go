package e2bdoor

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
)

// An argv goes through the session's shell as it is: commandLine quotes every word, a real
// /bin/sh hands the program exactly those words, and argvOf reads them back for List.
func TestCommandLineKeepsTheArgv(t *testing.T) {
	t.Parallel()
	for _, argv := range [][]string{
		{"/bin/bash", "-l", "-c", "echo \"hello $HOME\"; exit 3"},
		{"printf", "%s|", "it's", "", "two  spaces", "a\nnewline", "$(touch /tmp/x)", "`id`", "*", "~", "-n", "é", "\"'\"'\""},
		{"/bin/bash", "-i", "-l"},
	} {
		line := commandLine(argv)
		got, ok := argvOf(line)
		require.True(t, ok, line)
		assert.Equal(t, argv, got, "read back from %s", line)

		// sh runs `exec <words>` of a program printing its arguments, NUL-separated.
		probe := append([]string{"/usr/bin/env", "printf", "%s\\0"}, argv...)
		out, err := exec.Command("/bin/sh", "-c", commandLine(probe)).Output()
		require.NoError(t, err, line)
		assert.Equal(t, argv, strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00"), "what the program got")
	}
	_, ok := argvOf("echo unquoted from elsewhere")
	assert.False(t, ok, "a program not started by the door")
	_, ok = argvOf("exec 'cut")
	assert.False(t, ok, "a program cut short")
}

// E2B's paths map onto the workspace: /home/user is its root, relative paths start there, ~ is
// it; anything else is refused.
func TestWorkspacePaths(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"": ".", "~": ".", "/home/user": ".", "/home/user/": ".", "/home/user/a/../b": "b", "a/b": "a/b", "./a": "a",
		"~/x/y": "x/y", "/home/user/dir/file.txt": "dir/file.txt",
	} {
		got, err := workspacePath(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"/", "/etc/passwd", "/home/username", "/home/user/../other", "..", "../x", "a/../../b", "a\x00b"} {
		_, err := workspacePath(in)
		assert.Equal(t, fault.Policy, fault.KindOf(err), "%q: %v", in, err)
	}
	assert.Equal(t, "/home/user", e2bPath("."))
	assert.Equal(t, "/home/user/a/b", e2bPath("a/b"))
}
