package providertest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// stateful checks stateful contexts (seed capability stateful: "variables persist across
// execute_code calls"; seed 004's runtime keeps a session's globals between calls).
func (s *suite) stateful(t *testing.T) {
	s.leaf(t, "honesty", 0, func(e *env) {
		sb := e.create()
		_, isContexts := sb.(providers.Contexts)
		if !e.caps.Stateful {
			r := e.run(e.ctx, sb, providers.ExecSpec{Code: "x = 1", Language: "python", Context: providers.DefaultContext})
			require.Error(e.t, r.err, "a named context on a provider without stateful")
			require.True(e.t, fault.IsKind(r.err, fault.Capability), "want a capability error, got %v", r.err)
			return
		}
		require.True(e.t, isContexts, "a provider declaring stateful must give sandboxes that implement providers.Contexts")
	})

	s.leaf(t, "python_globals_persist", needStateful, func(e *env) {
		sb := e.create()
		e.ctxRun(sb, "py", "python", "import math\nanswer = 6 * 7")
		require.Equal(e.t, "42 2.0\n", e.ctxRun(sb, "py", "python", "print(answer, math.sqrt(4))"))
		// A fresh interpreter outside the context does not see it.
		r := e.run(e.ctx, sb, providers.ExecSpec{Code: "print(answer)", Language: "python", Timeout: time.Minute})
		require.NoError(e.t, r.err)
		require.NotEqual(e.t, 0, r.status.ExitCode, "a context-less execution saw the context's globals")
	})

	s.leaf(t, "python_error_keeps_state", needStateful, func(e *env) {
		sb := e.create()
		e.ctxRun(sb, "py", "python", "kept = 'yes'")
		r := e.run(e.ctx, sb, providers.ExecSpec{Code: "print('before')\nundefined_name", Language: "python", Context: "py", Timeout: time.Minute})
		require.NoError(e.t, r.err)
		assert.Equal(e.t, 1, r.status.ExitCode)
		assert.Equal(e.t, "before\n", string(r.stdout))
		assert.Contains(e.t, string(r.stderr), "NameError")
		assert.Contains(e.t, string(r.stderr), "Traceback")
		assert.False(e.t, r.status.ContextLost)
		require.Equal(e.t, "yes\n", e.ctxRun(sb, "py", "python", "print(kept)"))
	})

	s.leaf(t, "restart_clears", needStateful, func(e *env) {
		sb := e.create()
		cm := sb.(providers.Contexts)
		e.ctxRun(sb, "py", "python", "gone_after_restart = 1")
		info, err := cm.RestartContext(e.ctx, "py")
		require.NoError(e.t, err)
		assert.Equal(e.t, "py", info.Name)
		r := e.run(e.ctx, sb, providers.ExecSpec{Code: "print(gone_after_restart)", Language: "python", Context: "py", Timeout: time.Minute})
		require.NoError(e.t, r.err)
		assert.Equal(e.t, 1, r.status.ExitCode, "stdout %q", r.stdout)
		assert.Contains(e.t, string(r.stderr), "NameError")
		_, err = cm.RestartContext(e.ctx, "no-such-context")
		assert.True(e.t, fault.IsKind(err, fault.NotFound), "restart of an unknown context: %v", err)
	})

	s.leaf(t, "crash_is_reported_and_replaced", needStateful, func(e *env) {
		sb := e.create()
		e.ctxRun(sb, "py", "python", "lost = 1")
		r := e.run(e.ctx, sb, providers.ExecSpec{Code: "import os\nos._exit(3)", Language: "python", Context: "py", Timeout: time.Minute})
		require.NoError(e.t, r.err, "a crashed context is a result, not an error")
		assert.True(e.t, r.status.ContextLost, "ContextLost")
		assert.Equal(e.t, 3, r.status.ExitCode)
		r = e.run(e.ctx, sb, providers.ExecSpec{Code: "print('fresh', 'lost' in globals())", Language: "python", Context: "py", Timeout: time.Minute})
		require.NoError(e.t, r.err)
		require.Equal(e.t, 0, r.status.ExitCode, "stderr %s", r.stderr)
		assert.Equal(e.t, "fresh False\n", string(r.stdout))
	})

	s.leaf(t, "timeout_interrupts", needStateful, func(e *env) {
		sb := e.create()
		e.ctxRun(sb, "py", "python", "survivor = 'here'")
		r := e.run(e.ctx, sb, providers.ExecSpec{Code: "import time\nprint('started', flush=True)\ntime.sleep(600)", Language: "python", Context: "py", Timeout: time.Second})
		require.NoError(e.t, r.err)
		assert.True(e.t, r.status.TimedOut, "TimedOut")
		assert.Equal(e.t, "started\n", string(r.stdout))
		assert.Less(e.t, r.elapsed, time.Minute)
		// An interruptible program keeps its context.
		assert.Equal(e.t, "here\n", e.ctxRun(sb, "py", "python", "print(survivor)"))
	})

	s.leaf(t, "bash_keeps_cwd_and_exports", needStateful|needBash, func(e *env) {
		sb := e.create()
		e.ctxRun(sb, "sh", "bash", "mkdir -p sub/dir && cd sub/dir && export GREETING=hello")
		out := e.ctxRun(sb, "sh", "bash", `echo "$GREETING"; pwd`)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(e.t, lines, 2, "stdout %q", out)
		assert.Equal(e.t, "hello", lines[0])
		assert.True(e.t, strings.HasSuffix(lines[1], "/sub/dir"), "cwd %q", lines[1])
		_, err := sb.(providers.Contexts).RestartContext(e.ctx, "sh")
		require.NoError(e.t, err)
		assert.Equal(e.t, "[]\n", e.ctxRun(sb, "sh", "bash", `echo "[$GREETING]"`))
	})

	s.leaf(t, "env_applies_per_call", needStateful, func(e *env) {
		sb := e.create()
		// TZ in POSIX form (no zone database needed): three hours east of UTC, named ABC.
		callEnv := map[string]string{"TZ": "ABC-3", "ONCE": "yes"}
		probes := map[string]string{
			"python": "import os, time, datetime\n" +
				"print(os.environ.get('TZ', '-'), os.environ.get('ONCE', '-'), time.strftime('%Z %H', time.localtime(0)), datetime.datetime.fromtimestamp(0).hour)",
		}
		want := map[string]string{"python": "ABC-3 yes ABC 03 3\n"}
		if e.caps.SupportsLanguage("bash") {
			probes["bash"] = `printf '%s %s %(%Z %H)T\n' "${TZ--}" "${ONCE--}" 0`
			want["bash"] = "ABC-3 yes ABC 03\n"
		}
		for lang, probe := range probes {
			name := lang + "-env"
			before := e.ctxRun(sb, name, lang, probe)
			r := e.run(e.ctx, sb, providers.ExecSpec{Code: probe, Language: lang, Context: name, Env: callEnv, Timeout: time.Minute})
			require.NoError(e.t, r.err, "%s: Exec with env", lang)
			require.Equal(e.t, 0, r.status.ExitCode, "%s: stderr %s", lang, r.stderr)
			assert.Equal(e.t, want[lang], string(r.stdout), "%s: the call's env, time zone included, applies to the call", lang)
			assert.Equal(e.t, before, e.ctxRun(sb, name, lang, probe), "%s: the next call has the previous env and time zone again", lang)
		}
	})

	s.leaf(t, "lifecycle", needStateful, func(e *env) {
		sb := e.create()
		cm := sb.(providers.Contexts)
		_, err := cm.CreateContext(e.ctx, "b", "bash")
		require.NoError(e.t, err)
		_, err = cm.CreateContext(e.ctx, "a", "python")
		require.NoError(e.t, err)
		_, err = cm.CreateContext(e.ctx, "a", "python")
		assert.True(e.t, fault.IsKind(err, fault.Conflict), "creating an existing context: %v", err)
		_, err = cm.CreateContext(e.ctx, "c", "cobol")
		assert.True(e.t, fault.IsKind(err, fault.Validation), "an unknown language: %v", err)
		e.ctxRun(sb, "a", "python", "pass")
		list, err := cm.ListContexts(e.ctx)
		require.NoError(e.t, err)
		names := make([]string, len(list))
		for i, c := range list {
			names[i] = c.Name
			assert.True(e.t, c.Alive || c.Executions == 0, "context %s", c.Name)
		}
		require.Equal(e.t, []string{"a", "b"}, names)
		i := slices.IndexFunc(list, func(c providers.ContextInfo) bool { return c.Name == "a" })
		assert.Equal(e.t, "python", list[i].Language)
		assert.Equal(e.t, 1, list[i].Executions)
		require.NoError(e.t, cm.DeleteContext(e.ctx, "a"))
		assert.True(e.t, fault.IsKind(cm.DeleteContext(e.ctx, "a"), fault.NotFound))
		list, err = cm.ListContexts(e.ctx)
		require.NoError(e.t, err)
		require.Len(e.t, list, 1)
		// A context's language is fixed.
		r := e.run(e.ctx, sb, providers.ExecSpec{Code: "print(1)", Language: "python", Context: "b", Timeout: time.Minute})
		assert.True(e.t, fault.IsKind(r.err, fault.Validation), "python code in a bash context: %v", r.err)
	})
}

// ctxRun runs code in context name and requires success; it returns stdout.
func (e *env) ctxRun(sb providers.Sandbox, name, language, code string) string {
	e.t.Helper()
	r := e.run(e.ctx, sb, providers.ExecSpec{Code: code, Language: language, Context: name, Timeout: time.Minute})
	require.NoError(e.t, r.err, "Exec in context %s", name)
	require.Equal(e.t, 0, r.status.ExitCode, "Exec in context %s: stderr %s", name, r.stderr)
	return string(r.stdout)
}
