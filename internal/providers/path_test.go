package providers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

func TestCleanPath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":               ".",
		".":              ".",
		"./":             ".",
		"a":              "a",
		"a/":             "a",
		"a//b/./c/":      "a/b/c",
		"a/../b":         "b",
		"a/b/..":         "a",
		"a/..":           ".",
		"..a":            "..a",
		"a..":            "a..",
		"...":            "...",
		"%2e%2e/x":       "%2e%2e/x",
		"with space/ü 🦀": "with space/ü 🦀",
		"-rf":            "-rf",
		"new\nline":      "new\nline",
		`back\..\slash`:  `back\..\slash`,
	} {
		got, err := providers.CleanPath(in)
		require.NoError(t, err, "%q", in)
		assert.Equal(t, want, got, "%q", in)
	}
	for _, in := range []string{"..", "../", "../x", "/", "/etc/passwd", "//x", "a/../../x", "./../x", "a/b/../../..", "x\x00y", "\x00"} {
		_, err := providers.CleanPath(in)
		require.Error(t, err, "%q", in)
		assert.True(t, fault.IsKind(err, fault.Policy), "%q: %v", in, err)
		assert.Contains(t, err.Error(), "escapes the sandbox workspace")
	}
	_, err := providers.CleanPath("../x")
	assert.EqualError(t, err, "path '../x' escapes the sandbox workspace")
}

func TestValidEnvName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"A", "_", "a_b", "PATH", "_1", "x9Y"} {
		assert.True(t, providers.ValidEnvName(ok), ok)
	}
	for _, bad := range []string{"", "1A", "A-B", "A=B", "A B", "Ä", "$X", "A\x00", "a.b"} {
		assert.False(t, providers.ValidEnvName(bad), bad)
	}
}

func TestCheckExecSpec(t *testing.T) {
	t.Parallel()
	full := providers.Capabilities{Isolation: providers.IsolationNone, Shell: true, Languages: []string{"python", "bash"}}
	noShell := providers.Capabilities{Isolation: providers.IsolationNone, Languages: []string{"python"}}

	require.NoError(t, providers.CheckExecSpec("p", full, providers.ExecSpec{Command: "echo"}))
	require.NoError(t, providers.CheckExecSpec("p", full, providers.ExecSpec{Code: "1", Language: "bash", Dir: "a/b", Env: map[string]string{"A": "$(x)"}}))

	for name, tc := range map[string]struct {
		caps providers.Capabilities
		spec providers.ExecSpec
		kind fault.Kind
		cap  string
	}{
		"both":             {full, providers.ExecSpec{Command: "x", Code: "y", Language: "python"}, fault.Validation, ""},
		"neither":          {full, providers.ExecSpec{}, fault.Validation, ""},
		"language only":    {full, providers.ExecSpec{Language: "python"}, fault.Validation, ""},
		"command+language": {full, providers.ExecSpec{Command: "x", Language: "python"}, fault.Validation, ""},
		"code no language": {full, providers.ExecSpec{Code: "x"}, fault.Validation, ""},
		"negative timeout": {full, providers.ExecSpec{Command: "x", Timeout: -time.Second}, fault.Validation, ""},
		"shell undeclared": {noShell, providers.ExecSpec{Command: "x"}, fault.Capability, "shell"},
		"language":         {noShell, providers.ExecSpec{Code: "x", Language: "bash"}, fault.Capability, "language:bash"},
		"env name":         {full, providers.ExecSpec{Command: "x", Env: map[string]string{"A-B": "v"}}, fault.Validation, ""},
		"env value NUL":    {full, providers.ExecSpec{Command: "x", Env: map[string]string{"A": "a\x00b"}}, fault.Validation, ""},
		"program NUL":      {full, providers.ExecSpec{Command: "a\x00b"}, fault.Validation, ""},
		"dir escapes":      {full, providers.ExecSpec{Command: "x", Dir: "../x"}, fault.Policy, ""},
		"dir absolute":     {full, providers.ExecSpec{Command: "x", Dir: "/tmp"}, fault.Policy, ""},
	} {
		err := providers.CheckExecSpec("prov", tc.caps, tc.spec)
		require.Error(t, err, name)
		assert.Equal(t, tc.kind, fault.KindOf(err), "%s: %v", name, err)
		if tc.cap != "" {
			var fe *fault.Error
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.cap, fe.Capability, name)
			assert.Equal(t, "prov", fe.Subject, name)
			assert.True(t, strings.HasPrefix(err.Error(), "prov does not support capability: "), name)
		}
	}
}

// What execve cannot pass is a validation error before anything runs, not a provider
// failure (fork/exec: argument list too long).
func TestCheckExecSpecRefusesWhatTheKernelCannotPass(t *testing.T) {
	caps := providers.Capabilities{Isolation: providers.IsolationNone, Shell: true, Languages: []string{"python"}}
	big := strings.Repeat("x", providers.MaxArgBytes)
	for name, spec := range map[string]providers.ExecSpec{
		"long variable": {Command: "true", Env: map[string]string{"BIG": big}},
		"large environment": {Command: "true", Env: func() map[string]string {
			m := map[string]string{}
			for i := range 20 {
				m[fmt.Sprintf("V%d", i)] = big[:providers.MaxArgBytes/2]
			}
			return m
		}()},
	} {
		err := providers.CheckExecSpec("local_subprocess", caps, spec)
		require.True(t, fault.IsKind(err, fault.Validation), "%s: %v", name, err)
	}
	require.NoError(t, providers.CheckExecSpec("local_subprocess", caps, providers.ExecSpec{Command: "echo " + big, Env: map[string]string{"OK": big[:providers.MaxArgBytes-100]}}),
		"a long command is fine: providers do not pass it as an argument")
}
