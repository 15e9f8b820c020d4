package providertest

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// undeclaredLanguage is a language no provider declares (docs/semantics.md §4).
const undeclaredLanguage = "definitely-not-a-language"

// contract holds the seed's seven contract tests (docs/semantics.md §4).
func (s *suite) contract(t *testing.T) {
	s.leaf(t, "execute_code_python_is_mandatory", 0, func(e *env) {
		require.True(e.t, e.caps.SupportsLanguage("python"), "python must be declared")
		require.True(e.t, e.caps.Isolation.Valid(), "isolation %q is not a tier", e.caps.Isolation)
		sb := e.create()
		r := e.run(e.ctx, sb, providers.ExecSpec{Code: "print('hi')", Language: "python"})
		require.NoError(e.t, r.err)
		assert.Equal(e.t, 0, r.status.ExitCode, "stderr: %s", r.stderr)
		assert.False(e.t, r.status.TimedOut)
		assert.Equal(e.t, "hi\n", string(r.stdout))
	})

	s.leaf(t, "undeclared_language_is_capability_error", 0, func(e *env) {
		require.False(e.t, e.caps.SupportsLanguage(undeclaredLanguage))
		sb := e.create()
		r := e.run(e.ctx, sb, providers.ExecSpec{Code: "noop", Language: undeclaredLanguage})
		requireKind(e.t, r.err, fault.Capability)
		var fe *fault.Error
		require.True(e.t, errors.As(r.err, &fe))
		assert.Equal(e.t, "language:"+undeclaredLanguage, fe.Capability)
	})

	t.Run("capability_honesty", func(t *testing.T) {
		s.leaf(t, "shell", 0, func(e *env) {
			sb := e.create()
			r := e.run(e.ctx, sb, providers.ExecSpec{Command: "echo hi"})
			if !e.caps.Shell {
				requireKind(e.t, r.err, fault.Capability)
				return
			}
			require.NoError(e.t, r.err)
			assert.Equal(e.t, 0, r.status.ExitCode)
			assert.Equal(e.t, "hi\n", string(r.stdout))
		})
		s.leaf(t, "files", 0, func(e *env) {
			sb := e.create()
			_, werr := sb.WriteFile(e.ctx, "f.txt", bytes.NewReader([]byte("data")), 1<<20)
			rc, rerr := sb.ReadFile(e.ctx, "f.txt")
			if !e.caps.Files {
				requireKind(e.t, werr, fault.Capability, "WriteFile")
				requireKind(e.t, rerr, fault.Capability, "ReadFile")
				_, lerr := sb.ListFiles(e.ctx, "")
				requireKind(e.t, lerr, fault.Capability, "ListFiles")
				requireKind(e.t, sb.RemoveFile(e.ctx, "f.txt"), fault.Capability, "RemoveFile")
				return
			}
			require.NoError(e.t, werr)
			require.NoError(e.t, rerr)
			defer rc.Close()
			data, err := io.ReadAll(rc)
			require.NoError(e.t, err)
			assert.Equal(e.t, "data", string(data))
		})
		s.leaf(t, "package_install", 0, func(e *env) {
			sb := e.create()
			var out, errOut bytes.Buffer
			_, err := sb.InstallPackages(e.ctx, []string{"pip-noop"}, providers.Output{Stdout: &out, Stderr: &errOut})
			if !e.caps.PackageInstall {
				requireKind(e.t, err, fault.Capability)
				return
			}
			require.NoError(e.t, err, "a failed install is a status, not an error")
		})
	})

	s.leaf(t, "program_failure_is_result_not_error", 0, func(e *env) {
		code, lang := e.h.FailingProgram()
		sb := e.create()
		r := e.run(e.ctx, sb, providers.ExecSpec{Code: code, Language: lang})
		require.NoError(e.t, r.err)
		assert.NotEqual(e.t, 0, r.status.ExitCode)
		assert.False(e.t, r.status.TimedOut)
	})

	s.leaf(t, "close_is_idempotent", 0, func(e *env) {
		sb := e.create()
		require.NoError(e.t, sb.Close())
		require.NoError(e.t, sb.Close())
	})

	s.leaf(t, "destroy_is_idempotent", 0, func(e *env) {
		sb := e.create()
		id := sb.ID()
		require.NoError(e.t, sb.Close())
		require.NoError(e.t, e.p.Destroy(e.ctx, id))
		require.NoError(e.t, e.p.Destroy(e.ctx, id))
		require.NoError(e.t, e.p.Destroy(e.ctx, "unknown-sandbox-id"))
	})

	s.leaf(t, "attach_honesty", 0, func(e *env) {
		if !e.caps.Attach {
			_, err := e.p.Attach(e.ctx, "whatever", e.h.Principal, e.h.Policy)
			requireKind(e.t, err, fault.Capability)
			return
		}
		sb := e.create()
		again, err := e.p.Attach(e.ctx, sb.ID(), e.h.Principal, e.h.Policy)
		require.NoError(e.t, err)
		require.NotNil(e.t, again)
		assert.Equal(e.t, sb.ID(), again.ID(), "the id is stable across attach")
		require.NoError(e.t, again.Close())
		_, err = e.p.Attach(e.ctx, "nonexistent-id", e.h.Principal, e.h.Policy)
		requireKind(e.t, err, fault.Gone)
	})
}
