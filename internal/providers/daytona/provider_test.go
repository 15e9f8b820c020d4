package daytona_test

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
	"github.com/sandgate/sandgate/internal/providers/daytona"
	"github.com/sandgate/sandgate/internal/providers/daytona/daytonafake"
)

// New refuses what cannot work before any call to Daytona.
func TestNewRefusesBadSettings(t *testing.T) {
	t.Parallel()
	fake := daytonafake.New(t)
	key := func(string) string { return "k" }
	for name, tc := range map[string]struct {
		opts daytona.Options
		kind fault.Kind
		msg  string
	}{
		"no API key":         {daytona.Options{Getenv: func(string) string { return "" }}, fault.Config, "DAYTONA_API_KEY is not set"},
		"other key variable": {daytona.Options{Config: daytona.Config{APIKeyEnv: "MY_KEY"}, Getenv: func(string) string { return "" }}, fault.Config, "MY_KEY is not set"},
		"image and snapshot": {daytona.Options{Config: daytona.Config{Image: "a", Snapshot: "b"}, Getenv: key}, fault.Config, "mutually exclusive"},
		"snapshot with cpu": {daytona.Options{Config: daytona.Config{Snapshot: "b"}, Getenv: key,
			Policy: providers.Policy{CPU: 1, Strict: true, Timeout: time.Minute}}, fault.Config, "built from an image"},
		"half a core, strict": {daytona.Options{Getenv: key, Policy: providers.Policy{CPU: 0.5, Strict: true, Timeout: time.Minute}}, fault.Config, "whole CPU cores"},
		"512 MiB, strict":     {daytona.Options{Getenv: key, Policy: providers.Policy{MemoryMB: 512, Strict: true, Timeout: time.Minute}}, fault.Config, "whole GiB"},
		"domain allowed, strict": {daytona.Options{Getenv: key, Policy: providers.Policy{
			NetworkEgress: providers.EgressAllowlist, NetworkAllow: []string{"10.0.0.0/8", "pypi.org"}, Strict: true, Timeout: time.Minute}}, fault.Policy, "pypi.org"},
		"api_url": {daytona.Options{Config: daytona.Config{APIURL: "app.daytona.io"}, Getenv: key}, fault.Config, "not an http(s) URL"},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.opts.Config.APIURL == "" {
				tc.opts.Config.APIURL = fake.URL
			}
			_, err := daytona.New(tc.opts)
			require.Error(t, err)
			assert.Equal(t, tc.kind, fault.KindOf(err), "%v", err)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

// What Create asks Daytona for: snapshot or image, resources, network, auto-stop, env,
// target, labels.
func TestCreateRequest(t *testing.T) {
	t.Parallel()
	fake := daytonafake.New(t)
	fake.AddSnapshot("team/python")

	p := newProvider(t, fake, daytona.Options{
		Config:      daytona.Config{Snapshot: "team/python", Target: "eu", EnvVars: map[string]string{"TEAM": "core"}},
		Profile:     "snap",
		Policy:      providers.Policy{NetworkEgress: providers.EgressDeny, Timeout: time.Minute, Strict: true},
		IdleTimeout: 90 * time.Second,
	})
	sb := create(t, p)
	got, ok := fake.Sandbox(sb.ID())
	require.True(t, ok)
	assert.Equal(t, "team/python", got.Snapshot)
	assert.Empty(t, got.Image)
	assert.True(t, got.BlockAll)
	assert.Equal(t, 2, got.AutoStop, "ceil(90 s / 1 min)")
	assert.Equal(t, "eu", got.Target)
	assert.Equal(t, map[string]string{"TEAM": "core"}, got.Env)
	assert.Equal(t, map[string]string{"app.kubernetes.io/managed-by": "sandgate", "sandgate.io/profile": "snap", "code-toolbox-language": "python"}, got.Labels)
	assert.False(t, p.Capabilities().PolicyResources, "a pinned snapshot cannot be sized")
	res := run(t, sb, providers.ExecSpec{Command: `printf '%s' "$TEAM"`})
	require.NoError(t, res.err)
	assert.Equal(t, "core", res.stdout, "env_vars reach programs")

	// Resources (rounded up when not strict) force the image path; the allow-list keeps CIDRs.
	p = newProvider(t, fake, daytona.Options{Policy: providers.Policy{
		CPU: 1.5, MemoryMB: 1536, NetworkEgress: providers.EgressAllowlist,
		NetworkAllow: []string{"10.1.2.3/8", "192.168.1.5", "2001:db8::1", "example.com"}, Timeout: time.Minute,
	}})
	got, _ = fake.Sandbox(create(t, p).ID())
	assert.Equal(t, "python:3.12-slim", got.Image)
	assert.Equal(t, 2, got.CPU)
	assert.Equal(t, 2, got.Memory)
	assert.False(t, got.BlockAll)
	assert.Equal(t, "10.0.0.0/8,192.168.1.5/32,2001:db8::1/128", got.AllowList, "the domain is dropped (not strict)")
	assert.Equal(t, 30, got.AutoStop)

	// Without resources and without a block image: Daytona's default snapshot.
	got, _ = fake.Sandbox(create(t, newProvider(t, fake, daytona.Options{})).ID())
	assert.Equal(t, daytonafake.DefaultSnapshot, got.Snapshot)

	// An unknown snapshot is Daytona's refusal: provision.
	_, err := newProvider(t, fake, daytona.Options{Config: daytona.Config{Snapshot: "nope"}}).Create(t.Context(), agent, pol)
	assert.True(t, fault.IsKind(err, fault.Provision), "%v", err)
	assert.Contains(t, err.Error(), "nope")
}

// Attach starts a sandbox Daytona stopped (auto-stop) and finds its files; unknown and
// foreign sandboxes are gone, and Destroy leaves foreign ones alone.
func TestAttach(t *testing.T) {
	t.Parallel()
	fake := daytonafake.New(t)
	p := newProvider(t, fake, daytona.Options{})
	sb := create(t, p)
	_, err := sb.WriteFile(t.Context(), "kept.txt", strings.NewReader("state"), 1<<20)
	require.NoError(t, err)
	require.True(t, fake.Stop(sb.ID()))
	got, _ := fake.Sandbox(sb.ID())
	require.Equal(t, "stopped", got.State)

	again, err := p.Attach(t.Context(), sb.ID(), agent, pol)
	require.NoError(t, err)
	got, _ = fake.Sandbox(sb.ID())
	assert.Equal(t, "started", got.State)
	res := run(t, again, providers.ExecSpec{Command: "cat kept.txt"})
	require.NoError(t, res.err)
	assert.Equal(t, "state", res.stdout)

	_, err = p.Attach(t.Context(), "no-such-sandbox", agent, pol)
	assert.True(t, fault.IsKind(err, fault.Gone), "%v", err)

	// A sandbox someone else made with the same key.
	body, _ := json.Marshal(map[string]any{"labels": map[string]string{"owner": "someone"}})
	req, _ := http.NewRequest("POST", fake.URL+"/sandbox", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+fake.APIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var foreign struct{ ID string }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&foreign))
	resp.Body.Close()
	_, err = p.Attach(t.Context(), foreign.ID, agent, pol)
	assert.True(t, fault.IsKind(err, fault.Gone), "%v", err)
	assert.Contains(t, err.Error(), "not managed by Sandgate")
	require.NoError(t, p.Destroy(t.Context(), foreign.ID))
	_, ok := fake.Sandbox(foreign.ID)
	assert.True(t, ok, "a foreign sandbox is not deleted")

	list, err := p.List(t.Context())
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, daytona.SandboxInfo{ID: sb.ID(), State: "started"}, list[0])
}

// Exit codes pass through; a signal shows as 128+n; the streams end exactly as written.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	sb := create(t, newProvider(t, daytonafake.New(t), daytona.Options{}))
	for cmd, code := range map[string]int{"exit 3": 3, "kill -9 $$": 137, "kill -TERM $$": 143, "true": 0} {
		res := run(t, sb, providers.ExecSpec{Command: cmd})
		require.NoError(t, res.err, cmd)
		assert.Equal(t, code, res.st.ExitCode, cmd)
		assert.Empty(t, res.st.Signal, "Daytona reports no signal names")
	}
	res := run(t, sb, providers.ExecSpec{Command: "printf 'a\\nb'; printf 'partial' >&2"})
	require.NoError(t, res.err)
	assert.Equal(t, "a\nb", res.stdout, "no line break is added to a last partial line")
	assert.Equal(t, "partial", res.stderr)
}

// A working folder is confined lexically and must exist; a stdin reader's error is
// returned; a closed handle refuses work.
func TestWorkingFolder(t *testing.T) {
	t.Parallel()
	sb := create(t, newProvider(t, daytonafake.New(t), daytona.Options{}))
	res := run(t, sb, providers.ExecSpec{Command: "mkdir -p 'a b/c'"})
	require.NoError(t, res.err)
	res = run(t, sb, providers.ExecSpec{Command: "pwd", Dir: "a b/c"})
	require.NoError(t, res.err)
	assert.True(t, strings.HasSuffix(res.stdout, "/a b/c\n"), res.stdout)
	for _, dir := range []string{"..", "../x", "/tmp", "a b/../../x"} {
		res = run(t, sb, providers.ExecSpec{Command: "pwd", Dir: dir})
		assert.True(t, fault.IsKind(res.err, fault.Policy), "%s: %v", dir, res.err)
	}
	res = run(t, sb, providers.ExecSpec{Command: "pwd", Dir: "missing"})
	assert.True(t, fault.IsKind(res.err, fault.NotFound), "%v", res.err)

	require.NoError(t, sb.Close())
	res = run(t, sb, providers.ExecSpec{Command: "true"})
	assert.True(t, fault.IsKind(res.err, fault.Conflict), "%v", res.err)
}

// A python context whose interpreter dies is reported lost and replaced; sys.exit ends an
// execution normally (Daytona's interpreter reports no status); contexts and their state are
// seen by a second handle; bash contexts keep exports and the working folder.
func TestContexts(t *testing.T) {
	t.Parallel()
	fake := daytonafake.New(t)
	p := newProvider(t, fake, daytona.Options{})
	sb := create(t, p)
	py := func(sb providers.Sandbox, code string) result {
		t.Helper()
		return run(t, sb, providers.ExecSpec{Code: code, Language: "python", Context: "py", Timeout: time.Minute})
	}
	require.NoError(t, py(sb, "lost = 1").err)
	res := py(sb, "import os\nos._exit(3)")
	require.NoError(t, res.err)
	assert.True(t, res.st.ContextLost)
	assert.Equal(t, 1, res.st.ExitCode)
	assert.Contains(t, res.stderr, "its state is lost")
	res = py(sb, "print('fresh', 'lost' in globals())")
	require.NoError(t, res.err)
	assert.Equal(t, "fresh False\n", res.stdout)

	res = py(sb, "import sys\nkept = 'yes'\nsys.exit(4)")
	require.NoError(t, res.err)
	assert.Equal(t, 0, res.st.ExitCode, "sys.exit completes normally in Daytona's interpreter")

	_, err := sb.Exec(t.Context(), providers.ExecSpec{Code: "input()", Language: "python", Context: "py", Stdin: strings.NewReader("x")})
	assert.True(t, fault.IsKind(err, fault.Validation), "%v", err)

	other, err := p.Attach(t.Context(), sb.ID(), agent, pol)
	require.NoError(t, err)
	res = py(other, "print(kept)")
	require.NoError(t, res.err)
	assert.Equal(t, "yes\n", res.stdout, "another handle finds the context")
	list, err := other.(providers.Contexts).ListContexts(t.Context())
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "py", list[0].Name)

	// A restart of the sandbox loses the interpreter: the next execution says so.
	require.True(t, fake.Stop(sb.ID()))
	again, err := p.Attach(t.Context(), sb.ID(), agent, pol)
	require.NoError(t, err)
	res = py(again, "print('kept' in globals())")
	require.NoError(t, res.err)
	assert.True(t, res.st.ContextReset)
	assert.Equal(t, "False\n", res.stdout)

	sh := func(code string) result {
		t.Helper()
		return run(t, again, providers.ExecSpec{Code: code, Language: "bash", Context: "sh", Env: map[string]string{"ONCE": "1"}})
	}
	require.NoError(t, sh("mkdir -p d && cd d && export GREETING=hi").err)
	res = sh(`echo "$GREETING ${ONCE:-unset}" $(basename "$PWD")`)
	require.NoError(t, res.err)
	assert.Equal(t, "hi 1 d\n", res.stdout)
	res = run(t, again, providers.ExecSpec{Code: `echo "[${ONCE:-}]"`, Language: "bash", Context: "sh"})
	require.NoError(t, res.err)
	assert.Equal(t, "[]\n", res.stdout, "a per-execution variable does not stay")
}

// Package installs run pip with the names as arguments (a local path here: no network in
// tests); a name that looks like an option is
// refused.
func TestInstallPackages(t *testing.T) {
	t.Parallel()
	sb := create(t, newProvider(t, daytonafake.New(t), daytona.Options{}))
	_, err := sb.InstallPackages(t.Context(), []string{"--index-url=http://evil"}, providers.Output{})
	assert.True(t, fault.IsKind(err, fault.Validation), "%v", err)
	var out, errb bytes.Buffer
	st, err := sb.InstallPackages(t.Context(), []string{"./sandgate-no-such-folder"}, providers.Output{Stdout: &out, Stderr: &errb})
	require.NoError(t, err, "a failed install is a status")
	assert.NotEqual(t, 0, st.ExitCode)
}
