package providertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// exec holds the process-execution and output tests (field-notes "Process execution",
// "Output and encodings", "Security": environment).
func (s *suite) exec(t *testing.T) {
	s.leaf(t, "timeout_kills_process_tree", needShell, func(e *env) {
		sb := e.create()
		delay := e.treeDelay()
		start := time.Now()
		r := e.run(e.ctx, sb, providers.ExecSpec{Command: treeScript(delay), Timeout: time.Second})
		require.NoError(e.t, r.err, "a timeout is a status, not an error")
		assert.True(e.t, r.status.TimedOut, "status must say timed out: %+v", r.status)
		assert.Less(e.t, r.elapsed, delay, "the timeout fires at the wall-clock deadline, not when the program ends")
		assert.Equal(e.t, "started\n", string(r.stdout), "output written before the timeout is kept")
		e.requireTreeDead(sb, start, delay)
	})

	s.leaf(t, "cancel_kills_process_tree", needShell, func(e *env) {
		sb := e.create()
		delay := e.treeDelay()
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		timer := time.AfterFunc(time.Second, cancel)
		defer timer.Stop()
		start := time.Now()
		r := e.run(ctx, sb, providers.ExecSpec{Command: treeScript(delay)})
		require.ErrorIs(e.t, r.err, context.Canceled)
		assert.Less(e.t, r.elapsed, delay)
		e.requireTreeDead(sb, start, delay)
	})

	s.leaf(t, "background_child_does_not_hang", needShell, func(e *env) {
		sb := e.create()
		r := e.run(e.ctx, sb, providers.ExecSpec{Command: "sleep 30 & echo started", Timeout: 2 * time.Minute})
		require.NoError(e.t, r.err)
		assert.Less(e.t, r.elapsed, 15*time.Second, "the call must end when the direct child exits")
		assert.False(e.t, r.status.TimedOut)
		assert.Equal(e.t, 0, r.status.ExitCode)
		assert.Equal(e.t, "started\n", string(r.stdout))
	})

	s.leaf(t, "stdin_is_empty", needShell, func(e *env) {
		sb := e.create()
		r := e.run(e.ctx, sb, providers.ExecSpec{Command: "cat; echo done", Timeout: time.Minute})
		require.NoError(e.t, r.err)
		assert.False(e.t, r.status.TimedOut, "reading stdin must see EOF at once")
		assert.Less(e.t, r.elapsed, 30*time.Second)
		assert.Equal(e.t, "done\n", string(r.stdout))
	})

	s.leaf(t, "stdin_is_fed", 0, func(e *env) {
		sb := e.create()
		r := e.run(e.ctx, sb, providers.ExecSpec{
			Code:     "import sys\nsys.stdout.write(sys.stdin.read().upper())",
			Language: "python",
			Stdin:    strings.NewReader("line one\nline two\n"),
			Timeout:  time.Minute,
		})
		require.NoError(e.t, r.err)
		assert.Equal(e.t, 0, r.status.ExitCode, "stderr: %s", r.stderr)
		assert.Equal(e.t, "LINE ONE\nLINE TWO\n", string(r.stdout))
	})

	s.leaf(t, "exit_codes_and_signals", needShell, func(e *env) {
		sb := e.create()
		for _, tc := range []struct {
			command string
			code    int
			signal  string
		}{
			{"exit 3", 3, ""},
			{"echo kept; exit 42", 42, ""},
			{"kill -9 $$", 137, "SIGKILL"},
			{"kill -TERM $$", 143, "SIGTERM"},
		} {
			r := e.run(e.ctx, sb, providers.ExecSpec{Command: tc.command, Timeout: time.Minute})
			require.NoError(e.t, r.err, tc.command)
			assert.Equal(e.t, tc.code, r.status.ExitCode, tc.command)
			assert.Equal(e.t, tc.signal, r.status.Signal, tc.command)
			assert.False(e.t, r.status.TimedOut, tc.command)
		}
		r := e.run(e.ctx, sb, providers.ExecSpec{Code: "import sys\nprint('kept')\nsys.exit(4)", Language: "python"})
		require.NoError(e.t, r.err)
		assert.Equal(e.t, 4, r.status.ExitCode)
		assert.Equal(e.t, "kept\n", string(r.stdout), "output of a failed run is kept")
	})

	s.leaf(t, "command_not_found_is_127", needShell, func(e *env) {
		sb := e.create()
		r := e.run(e.ctx, sb, providers.ExecSpec{Command: "sandgate-definitely-not-a-command --flag", Timeout: time.Minute})
		require.NoError(e.t, r.err)
		assert.Equal(e.t, 127, r.status.ExitCode)
		assert.Empty(e.t, r.stdout)
		assert.Contains(e.t, string(r.stderr), "sandgate-definitely-not-a-command")
	})

	s.leaf(t, "stdout_and_stderr_are_separate", 0, func(e *env) {
		sb := e.create()
		r := e.run(e.ctx, sb, providers.ExecSpec{
			Code:     "import sys\nprint('to out')\nprint('to err', file=sys.stderr)\nprint('out again')",
			Language: "python",
		})
		require.NoError(e.t, r.err)
		assert.Equal(e.t, "to out\nout again\n", string(r.stdout))
		assert.Equal(e.t, "to err\n", string(r.stderr))
		if e.caps.Shell {
			r = e.run(e.ctx, sb, providers.ExecSpec{Command: "echo out; echo err >&2; echo out2"})
			require.NoError(e.t, r.err)
			assert.Equal(e.t, "out\nout2\n", string(r.stdout))
			assert.Equal(e.t, "err\n", string(r.stderr))
		}
	})

	s.leaf(t, "partial_output_kept_on_timeout", needShell, func(e *env) {
		sb := e.create()
		r := e.run(e.ctx, sb, providers.ExecSpec{Command: "echo before; echo warn >&2; sleep 600; echo after", Timeout: time.Second})
		require.NoError(e.t, r.err)
		assert.True(e.t, r.status.TimedOut)
		assert.Equal(e.t, "before\n", string(r.stdout))
		assert.Equal(e.t, "warn\n", string(r.stderr))
	})

	s.leaf(t, "partial_python_output_kept_on_timeout", 0, func(e *env) {
		sb := e.create()
		r := e.run(e.ctx, sb, providers.ExecSpec{
			Code:     "import time\nprint('before')\ntime.sleep(600)",
			Language: "python",
			Timeout:  2 * time.Second,
		})
		require.NoError(e.t, r.err)
		assert.True(e.t, r.status.TimedOut)
		assert.Equal(e.t, "before\n", string(r.stdout), "python output must not be lost in a buffer")
	})

	s.leaf(t, "env_passed_natively", 0, func(e *env) {
		sb := e.create()
		value := "$(touch pwned1) `touch pwned2`; touch pwned3 \"dq\" 'sq' \\ | & $HOME\nsecond line ünï 🦀"
		env := map[string]string{"SANDGATE_VALUE": value, "SANDGATE_EMPTY": ""}
		r := e.run(e.ctx, sb, providers.ExecSpec{
			Code:     "import os, sys\nsys.stdout.write(os.environ['SANDGATE_VALUE'])\nsys.stderr.write(repr(os.environ['SANDGATE_EMPTY']))",
			Language: "python",
			Env:      env,
		})
		require.NoError(e.t, r.err)
		assert.Equal(e.t, value, string(r.stdout))
		assert.Equal(e.t, "''", string(r.stderr))
		if e.caps.Shell {
			r = e.run(e.ctx, sb, providers.ExecSpec{Command: `printf '%s' "$SANDGATE_VALUE"`, Env: env})
			require.NoError(e.t, r.err)
			assert.Equal(e.t, value, string(r.stdout))
			assert.Equal(e.t, "clean\n", e.sh(sb, "for f in pwned1 pwned2 pwned3; do test -e $f && echo $f; done; echo clean"),
				"nothing in an environment value may run")
		}
	})

	s.leaf(t, "invalid_env_name_is_validation_error", 0, func(e *env) {
		sb := e.create()
		for _, name := range []string{"", "1ABC", "A-B", "A=B", "A B", "$(touch x)", "Ä"} {
			r := e.run(e.ctx, sb, providers.ExecSpec{Code: "print(1)", Language: "python", Env: map[string]string{name: "v"}})
			requireKind(e.t, r.err, fault.Validation, "env name %q", name)
		}
	})

	s.leaf(t, "working_folder_is_confined", needShell, func(e *env) {
		sb := e.create()
		e.sh(sb, "mkdir -p 'sub/dir with space' && ln -s / rootlink && ln -s .. uplink")
		r := e.run(e.ctx, sb, providers.ExecSpec{Command: "pwd", Dir: "sub/dir with space"})
		require.NoError(e.t, r.err)
		assert.True(e.t, strings.HasSuffix(string(r.stdout), "/sub/dir with space\n"), "pwd: %q", r.stdout)
		for _, dir := range []string{"..", "../..", "/", "/tmp", "sub/../..", "rootlink", "uplink", "rootlink/tmp"} {
			r := e.run(e.ctx, sb, providers.ExecSpec{Command: "pwd", Dir: dir})
			requireKind(e.t, r.err, fault.Policy, "dir %q", dir)
		}
		r = e.run(e.ctx, sb, providers.ExecSpec{Command: "pwd", Dir: "no-such-folder"})
		require.Error(e.t, r.err, "a missing working folder")
	})

	s.leaf(t, "non_utf8_output_is_kept", 0, func(e *env) {
		sb := e.create()
		all := make([]byte, 256)
		for i := range all {
			all[i] = byte(i)
		}
		r := e.run(e.ctx, sb, providers.ExecSpec{
			Code:     "import sys\nsys.stdout.buffer.write(bytes(range(256)))\nsys.stderr.buffer.write(b'\\xff\\xfe\\xe2\\x82')",
			Language: "python",
		})
		require.NoError(e.t, r.err)
		assert.Equal(e.t, all, r.stdout, "every byte value survives")
		assert.Equal(e.t, []byte{0xff, 0xfe, 0xe2, 0x82}, r.stderr)
		if e.caps.Shell {
			// A multibyte character split across two writes arrives whole.
			r = e.run(e.ctx, sb, providers.ExecSpec{Command: `printf '\342\202'; sleep 0.2; printf '\254\n'`})
			require.NoError(e.t, r.err)
			assert.Equal(e.t, "€\n", string(r.stdout))
		}
	})

	s.leaf(t, "large_output_is_complete", 0, func(e *env) {
		sb := e.create()
		const size = 16 << 20
		out, errOut := &countingWriter{want: 'o'}, &countingWriter{want: 'e'}
		r := e.run(e.ctx, sb, providers.ExecSpec{
			Code: fmt.Sprintf("import sys\nfor _ in range(%d):\n    sys.stdout.buffer.write(b'o' * 65536)\n    sys.stderr.buffer.write(b'e' * 16384)\n",
				size/65536),
			Language: "python",
			Output:   providers.Output{Stdout: out, Stderr: errOut},
			Timeout:  2 * time.Minute,
		})
		require.NoError(e.t, r.err)
		assert.Equal(e.t, 0, r.status.ExitCode)
		assert.Equal(e.t, int64(size), out.n.Load())
		assert.Equal(e.t, int64(size/4), errOut.n.Load())
		assert.False(e.t, out.other.Load() || errOut.other.Load(), "streams are not mixed")
	})

	s.leaf(t, "large_code_runs", 0, func(e *env) {
		sb := e.create()
		// Over the kernel's 128 KiB limit for one argument.
		code := "x = '" + strings.Repeat("a", 300<<10) + "'\nprint(len(x))\n"
		r := e.run(e.ctx, sb, providers.ExecSpec{Code: code, Language: "python", Timeout: time.Minute})
		require.NoError(e.t, r.err)
		assert.Equal(e.t, 0, r.status.ExitCode, "stderr: %.500s", r.stderr)
		assert.Equal(e.t, fmt.Sprintf("%d\n", 300<<10), string(r.stdout))
		if e.caps.Shell {
			cmd := ": '" + strings.Repeat("b", 300<<10) + "'; echo ok"
			r = e.run(e.ctx, sb, providers.ExecSpec{Command: cmd, Timeout: time.Minute})
			require.NoError(e.t, r.err)
			assert.Equal(e.t, "ok\n", string(r.stdout), "stderr: %.500s", r.stderr)
		}
	})

	s.leaf(t, "bash_code_runs", needBash, func(e *env) {
		sb := e.create()
		r := e.run(e.ctx, sb, providers.ExecSpec{Code: "arr=(a b c)\necho ${#arr[@]} \"$BASH\"", Language: "bash"})
		require.NoError(e.t, r.err)
		assert.Equal(e.t, 0, r.status.ExitCode, "stderr: %s", r.stderr)
		assert.True(e.t, strings.HasPrefix(string(r.stdout), "3 "), "stdout %q", r.stdout)
	})

	s.leaf(t, "command_without_shell_is_capability_error", 0, func(e *env) {
		if e.caps.Shell {
			e.t.Skip("the provider declares shell")
		}
		sb := e.create()
		r := e.run(e.ctx, sb, providers.ExecSpec{Command: "echo hi"})
		requireKind(e.t, r.err, fault.Capability)
	})
}

// treeDelay is how long the grandchildren of treeScript wait before they write: beyond the
// one-second timeout, the provider's kill grace and a generous margin.
func (e *env) treeDelay() time.Duration {
	return (time.Second + e.h.KillGrace + 5*time.Second).Round(time.Second)
}

// treeScript starts two background grandchildren that write a file after delay, one of them
// ignoring SIGTERM, then blocks for ten minutes.
func treeScript(delay time.Duration) string {
	d := int(delay.Seconds())
	return fmt.Sprintf("(sleep %d; echo late > late1.txt) &\n"+
		"(trap '' TERM; sleep %d; echo late > late2.txt) &\n"+
		"echo started\n"+
		"sleep 600\n", d, d)
}

// requireTreeDead waits until treeScript's grandchildren would have written their files and
// checks that they did not: the whole process tree died with the execution.
func (e *env) requireTreeDead(sb providers.Sandbox, start time.Time, delay time.Duration) {
	e.t.Helper()
	time.Sleep(time.Until(start.Add(delay + 2*time.Second)))
	left := e.sh(sb, "for f in late1.txt late2.txt; do test -e $f && echo $f; done; echo checked")
	assert.Equal(e.t, "checked\n", left, "a grandchild outlived the execution")
}
