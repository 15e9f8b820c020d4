package e2b_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/e2b"
	"github.com/sandgate/sandgate/internal/providers/e2b/wire"
)

var agent = providers.Principal{Mode: providers.ModeAgent, Subject: "test"}

func policy(egress string, allow ...string) providers.Policy {
	return providers.Policy{NetworkEgress: egress, NetworkAllow: allow, Timeout: time.Minute, Strict: true}
}

type outcome struct {
	st             providers.ExitStatus
	err            error
	stdout, stderr string
}

func run(t *testing.T, sb providers.Sandbox, spec providers.ExecSpec) outcome {
	t.Helper()
	var out, errOut bytes.Buffer
	spec.Output = providers.Output{Stdout: &out, Stderr: &errOut}
	if spec.Timeout == 0 {
		spec.Timeout = time.Minute
	}
	st, err := sb.Exec(t.Context(), spec)
	return outcome{st: st, err: err, stdout: out.String(), stderr: errOut.String()}
}

// A missing API key variable stops the provider from being built (seed: a configuration error).
func TestMissingAPIKeyIsAConfigError(t *testing.T) {
	_, err := e2b.New(e2b.Options{Config: e2b.Config{APIKeyEnv: "NO_SUCH_KEY_VAR"}, LookupEnv: func(string) (string, bool) { return "", false }})
	require.Error(t, err)
	assert.Equal(t, fault.Config, fault.KindOf(err))
	assert.Contains(t, err.Error(), "NO_SUCH_KEY_VAR")
	_, err = e2b.New(e2b.Options{LookupEnv: func(string) (string, bool) { return "   ", true }})
	assert.Equal(t, fault.Config, fault.KindOf(err), "an empty key is no key")
}

// Create sends the template, the idle timeout as E2B's timeout, secure, metadata and the egress
// policy: deny → no internet access, allowlist → allowOut with everything else denied.
func TestCreateMapsPolicyAndTimeout(t *testing.T) {
	r := newRig(t, rigOpts{template: "base", idle: 90 * time.Second})
	for _, tc := range []struct {
		pol     providers.Policy
		check   func(t *testing.T, req wire.NewSandbox)
		comment string
	}{
		{policy(providers.EgressAllow), func(t *testing.T, req wire.NewSandbox) {
			assert.Nil(t, req.AllowInternetAccess)
			assert.Empty(t, req.Network.AllowOut)
			assert.Empty(t, req.Network.DenyOut)
		}, "allow"},
		{policy(providers.EgressDeny), func(t *testing.T, req wire.NewSandbox) {
			require.NotNil(t, req.AllowInternetAccess)
			assert.False(t, *req.AllowInternetAccess)
		}, "deny"},
		{policy(providers.EgressAllowlist, "10.0.0.0/8", "pypi.org", "*.pythonhosted.org"), func(t *testing.T, req wire.NewSandbox) {
			assert.Nil(t, req.AllowInternetAccess)
			assert.Equal(t, []string{"10.0.0.0/8", "pypi.org", "*.pythonhosted.org"}, req.Network.AllowOut)
			assert.Equal(t, []string{"0.0.0.0/0"}, req.Network.DenyOut)
		}, "allowlist"},
	} {
		sb, err := r.p.Create(t.Context(), agent, tc.pol)
		require.NoError(t, err, tc.comment)
		c, ok := r.fake.Sandbox(sb.ID())
		require.True(t, ok)
		assert.Equal(t, "base", c.Request.TemplateID)
		assert.EqualValues(t, 90, *c.Request.Timeout, "idle_timeout in seconds")
		assert.True(t, *c.Request.Secure, "envd demands the sandbox's access token")
		require.NotNil(t, c.Request.Network)
		require.NotNil(t, c.Request.Network.AllowPublicTraffic)
		assert.False(t, *c.Request.Network.AllowPublicTraffic, "the other ports demand the traffic access token")
		assert.Equal(t, map[string]string{e2b.MetaManagedBy: "sandgate", e2b.MetaProfile: "contract"}, c.Request.Metadata)
		tc.check(t, c.Request)
	}
	listed, err := r.p.ListSandboxes(t.Context())
	require.NoError(t, err)
	assert.Len(t, listed, 3)
}

// envd refuses a request without the sandbox's access token (secure sandboxes).
func TestEnvdDemandsTheAccessToken(t *testing.T) {
	r := newRig(t, rigOpts{template: "base"})
	sb, err := r.p.Create(t.Context(), agent, policy(providers.EgressAllow))
	require.NoError(t, err)
	body, _ := json.Marshal(wire.StatRequest{Path: "/home/user"})
	req, err := http.NewRequest("POST", r.fake.Sandboxes+wire.FSStat, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(wire.SandboxIDHeader, sb.ID())
	req.Header.Set(wire.SandboxPortHeader, "49983")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// The code interpreter's port answers only with the sandbox's traffic access token.
func TestCodeInterpreterDemandsTheTrafficToken(t *testing.T) {
	r := newRig(t, rigOpts{})
	sb, err := r.p.Create(t.Context(), agent, policy(providers.EgressAllow))
	require.NoError(t, err)
	req, err := http.NewRequest("GET", r.fake.Sandboxes+"/contexts", nil)
	require.NoError(t, err)
	req.Header.Set(wire.SandboxIDHeader, sb.ID())
	req.Header.Set(wire.SandboxPortHeader, "49999")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	o := run(t, sb, providers.ExecSpec{Code: "print('with the token')", Language: "python", Context: "default"})
	require.NoError(t, o.err)
	assert.Equal(t, "with the token\n", o.stdout)
}

// A sandbox whose timeout passed is gone: Attach says so (the domain's self-heal signal), and
// an old handle's Exec says nothing ran.
func TestExpiredSandboxIsGone(t *testing.T) {
	r := newRig(t, rigOpts{template: "base"})
	sb, err := r.p.Create(t.Context(), agent, policy(providers.EgressAllow))
	require.NoError(t, err)
	r.fake.Expire(sb.ID())
	_, err = r.p.Attach(t.Context(), sb.ID(), agent, policy(providers.EgressAllow))
	assert.True(t, fault.IsKind(err, fault.Gone), "%v", err)
	o := run(t, sb, providers.ExecSpec{Command: "echo never"})
	require.Error(t, o.err)
	assert.ErrorIs(t, o.err, providers.ErrUnreached)
	require.NoError(t, r.p.Destroy(t.Context(), sb.ID()), "destroying a gone sandbox is fine")
}

// A running execution counts as use: the provider extends E2B's timeout (every half timeout)
// while it runs, so a sandbox with a 6 s timeout survives a 9 s command.
func TestTimeoutIsRefreshedWhileRunning(t *testing.T) {
	r := newRig(t, rigOpts{template: "base", idle: 6 * time.Second})
	sb, err := r.p.Create(t.Context(), agent, policy(providers.EgressAllow))
	require.NoError(t, err)
	o := run(t, sb, providers.ExecSpec{Command: "sleep 9; echo survived"})
	require.NoError(t, o.err)
	assert.Equal(t, "survived\n", o.stdout)
	refreshed := 0
	for _, c := range r.fake.Calls() {
		if c.Path == "/sandboxes/"+sb.ID()+"/timeout" {
			refreshed++
			assert.JSONEq(t, `{"timeout":6}`, string(c.Body))
		}
	}
	assert.GreaterOrEqual(t, refreshed, 2)
	_, err = r.p.Attach(t.Context(), sb.ID(), agent, policy(providers.EgressAllow))
	require.NoError(t, err)
}

// Code in a context: an exception ends with "Name: value" on stderr and exit code 1; a kernel
// that died is ContextLost and the next execution starts afresh; bash cells give their exit
// status; env values the code interpreter cannot set are refused.
func TestContextExecutions(t *testing.T) {
	r := newRig(t, rigOpts{})
	sb, err := r.p.Create(t.Context(), agent, policy(providers.EgressAllow))
	require.NoError(t, err)

	o := run(t, sb, providers.ExecSpec{Code: "raise KeyError('k')", Language: "python", Context: "py"})
	require.NoError(t, o.err)
	assert.Equal(t, 1, o.st.ExitCode)
	assert.True(t, strings.HasSuffix(o.stderr, "KeyError: 'k'\n"), "%q", o.stderr)
	assert.Equal(t, 1, strings.Count(o.stderr, "KeyError: 'k'"), "the last line is not repeated: %q", o.stderr)

	run(t, sb, providers.ExecSpec{Code: "lost = 1", Language: "python", Context: "py"})
	o = run(t, sb, providers.ExecSpec{Code: "import os\nos._exit(3)", Language: "python", Context: "py"})
	require.NoError(t, o.err)
	assert.True(t, o.st.ContextLost)
	assert.Equal(t, 1, o.st.ExitCode)
	assert.Equal(t, "ContextRestarting: Context was restarted\n", o.stderr)
	o = run(t, sb, providers.ExecSpec{Code: "print('lost' in globals())", Language: "python", Context: "py"})
	require.NoError(t, o.err)
	assert.Equal(t, "False\n", o.stdout)

	o = run(t, sb, providers.ExecSpec{Code: "false", Language: "bash", Context: "sh"})
	require.NoError(t, o.err)
	assert.Equal(t, 1, o.st.ExitCode, "bash_kernel's exit status")
	o = run(t, sb, providers.ExecSpec{Code: "(exit 7)", Language: "bash", Context: "sh"})
	require.NoError(t, o.err)
	assert.Equal(t, 7, o.st.ExitCode)

	o = run(t, sb, providers.ExecSpec{Code: "import os\nprint(os.environ['GREETING'])", Language: "python", Context: "py", Env: map[string]string{"GREETING": "hello there"}})
	require.NoError(t, o.err)
	assert.Equal(t, "hello there\n", o.stdout)
	o = run(t, sb, providers.ExecSpec{Code: "pass", Language: "python", Context: "py", Env: map[string]string{"Q": "it's"}})
	assert.True(t, fault.IsKind(o.err, fault.Validation), "%v", o.err)
	o = run(t, sb, providers.ExecSpec{Code: "pass", Language: "python", Context: "py", Dir: "sub"})
	assert.True(t, fault.IsKind(o.err, fault.Validation), "%v", o.err)
	o = run(t, sb, providers.ExecSpec{Code: "pass", Language: "python", Context: "py", Stdin: strings.NewReader("data")})
	assert.True(t, fault.IsKind(o.err, fault.Validation), "%v", o.err)
}

// The map of context names to kernels lives in the sandbox: another provider (another
// replica, a restarted gateway) finds the same context with its state.
func TestContextsAreFoundByAnotherGateway(t *testing.T) {
	r := newRig(t, rigOpts{})
	sb, err := r.p.Create(t.Context(), agent, policy(providers.EgressAllow))
	require.NoError(t, err)
	o := run(t, sb, providers.ExecSpec{Code: "kept = 'across gateways'", Language: "python", Context: "default"})
	require.NoError(t, o.err)

	other := newProvider(t, r.fake, rigOpts{})
	again, err := other.Attach(t.Context(), sb.ID(), agent, policy(providers.EgressAllow))
	require.NoError(t, err)
	o = run(t, again, providers.ExecSpec{Code: "print(kept)", Language: "python", Context: "default"})
	require.NoError(t, o.err)
	assert.Equal(t, "across gateways\n", o.stdout)
	list, err := again.(providers.Contexts).ListContexts(t.Context())
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "default", list[0].Name)
	assert.True(t, list[0].Alive)
}

// Program text over 64 KiB travels on standard input ahead of the caller's: the program still
// reads exactly the caller's input, for python, sh and bash.
func TestLargeProgramsKeepTheirStdin(t *testing.T) {
	r := newRig(t, rigOpts{template: "base"})
	sb, err := r.p.Create(t.Context(), agent, policy(providers.EgressAllow))
	require.NoError(t, err)
	pad := strings.Repeat("#", 80<<10)
	for _, spec := range []providers.ExecSpec{
		{Code: pad + "\nimport sys\nprint(sys.stdin.read().upper(), end='')\nprint(sys.argv)", Language: "python"},
		{Command: ": '" + pad + "'\ntr a-z A-Z; echo \"$0\""},
		{Code: ": '" + pad + "'\ntr a-z A-Z", Language: "bash"},
	} {
		spec.Stdin = strings.NewReader("fed after the program\n")
		o := run(t, sb, spec)
		require.NoError(t, o.err)
		require.Equal(t, 0, o.st.ExitCode, "stderr: %.300s", o.stderr)
		assert.True(t, strings.HasPrefix(o.stdout, "FED AFTER THE PROGRAM\n"), "%q", o.stdout)
		if spec.Language == "python" {
			assert.Contains(t, o.stdout, "['-c']", "sys.argv as for python -c")
		}
	}
}
