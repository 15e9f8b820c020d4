package ec2ssm

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
)

func TestQuoteRoundTripsThroughSh(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", "it's", "''", `a\b`, "$(id) `id` $HOME ${x}", "line\nbreak", "ünï 🦀", "'; rm -rf / #", `"dq" 'sq'`} {
		out, err := exec.Command("/bin/sh", "-c", "printf '%s' "+quote(s)).Output()
		require.NoError(t, err, s)
		assert.Equal(t, s, string(out))
	}
}

func TestDelimiterFor(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "SANDGATE_EOF", delimiterFor("print(1)", heredocDelimiter))
	assert.Equal(t, "SANDGATE_EOF", delimiterFor("x = 'SANDGATE_EOF'\n  SANDGATE_EOF\nSANDGATE_EOF ", heredocDelimiter), "only whole lines collide")
	assert.Equal(t, "SANDGATE_EOF_1", delimiterFor("a\nSANDGATE_EOF\nb", heredocDelimiter))
	assert.Equal(t, "SANDGATE_EOF_3", delimiterFor("SANDGATE_EOF_2\nSANDGATE_EOF\nSANDGATE_EOF_1", heredocDelimiter))
	assert.Equal(t, "SANDGATE_EOF_1", delimiterFor("SANDGATE_EOF", heredocDelimiter))
}

func TestHeredocCarriesCodeExactly(t *testing.T) {
	t.Parallel()
	for _, code := range []string{
		"print('no newline')",
		"print('trailing')\n",
		"s = '''\nSANDGATE_EOF\n'''\nprint(repr(s))",
		"print(r'$HOME `id` \\n \\\\')",
	} {
		script := "cat " + heredoc("", code)
		out, err := exec.Command("/bin/sh", "-c", script).Output()
		require.NoError(t, err)
		want := code
		if !strings.HasSuffix(want, "\n") {
			want += "\n"
		}
		assert.Equal(t, want, string(out))
	}
}

func TestProgramShapes(t *testing.T) {
	t.Parallel()
	p := program(providers.ExecSpec{Command: "echo hi", Env: map[string]string{"B": "2", "A": "it's"}}, "python3", nil)
	assert.Equal(t, "export A='it'\\''s'\nexport B='2'\nexec </dev/null\necho hi", p)

	p = program(providers.ExecSpec{Code: "print(1)", Language: "python"}, "python3", nil)
	assert.Equal(t, "export PYTHONUNBUFFERED='1'\nexec </dev/null\n'python3' - <<'SANDGATE_EOF'\nprint(1)\nSANDGATE_EOF", p)

	p = program(providers.ExecSpec{Code: "print(1)", Language: "python", Env: map[string]string{"PYTHONUNBUFFERED": ""}}, "/opt/py/bin/python3.12", []byte("in"))
	assert.Contains(t, p, "export PYTHONUNBUFFERED=''\n")
	assert.Contains(t, p, "printf '%s' 'aW4=' | base64 -d")
	assert.True(t, strings.HasSuffix(p, "'/opt/py/bin/python3.12' /dev/fd/3 3<<'SANDGATE_EOF'\nprint(1)\nSANDGATE_EOF"), p)

	assert.Equal(t, `sudo -n -u deploy sh -c 'echo '\''x'\'''`, asUser("deploy", "echo 'x'"))
}

func TestValidUser(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"deploy", "_svc", "ec2-user", "a.b", "User_1"} {
		assert.True(t, validUser(ok), ok)
	}
	for _, bad := range []string{"", "-u", "1abc", "a b", "a;b", "a'b", "a.", "ü", strings.Repeat("a", 33), "root\n"} {
		assert.False(t, validUser(bad), bad)
	}
}
