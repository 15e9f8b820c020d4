// Package python tests the Python client (this folder's package, clients/python/src/sandgate)
// against real gateways: it runs the client's pytest suite (tests/) with Debian's python3 and
// the README's Python quickstart, verbatim, each against a gateway started here.
package python

import (
	"encoding/base64"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// python is Debian's interpreter: the python3 first on PATH may be a pyenv or venv one
// without Debian's httpx and pytest (scripts/test-setup.sh installs those as packages).
const python = "/usr/bin/python3"

func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true and " + why)
	}
	t.Skip(why)
}

// requirePython skips (fails under CI=true) without Debian's python3 and the modules the
// client and its tests need.
func requirePython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		skipOrFail(t, python+" is missing (apt-get install python3; scripts/test-setup.sh does it)")
	}
	out, err := exec.Command(python, "-c", "import httpx, pytest, pytest_asyncio, yaml").CombinedOutput()
	if err != nil {
		skipOrFail(t, "Debian's python3 lacks a module of the Python client's tests (apt-get install python3-httpx python3-pytest python3-pytest-asyncio python3-yaml; scripts/test-setup.sh does it): "+strings.TrimSpace(string(out)))
	}
}

// dockerImage is the sandbox image of the docker profile, or "" (a skip, a failure under
// CI=true) without an engine or the image.
func dockerImage(t *testing.T) string {
	t.Helper()
	img := os.Getenv("SANDGATE_DOCKER_TEST_IMAGE")
	if img == "" {
		img = "sandgate/sandbox-python:latest"
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	why := ""
	if !docker.Available(ctx, "") {
		why = "no Docker engine is reachable (run scripts/docker-setup.sh)"
	} else if out, err := exec.CommandContext(ctx, "docker", "image", "inspect", img).CombinedOutput(); err != nil {
		why = "the sandbox image " + img + " is missing (scripts/docker-setup.sh builds it): " + strings.TrimSpace(string(out))
	}
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and " + why)
		}
		t.Log("the docker tests of the Python client will skip: " + why)
		return ""
	}
	return img
}

// start starts a gateway with the profiles the Python tests use: default (local, stateful),
// oneshot (local, per_call) and, with an image, docker (stateful, pause and snapshots).
func start(t *testing.T, image string, quotas func(*config.Quotas)) *gatewaytest.Env {
	workdir := t.TempDir()
	return gatewaytest.Start(t, gatewaytest.Options{Workdir: workdir, Config: func(c *config.Config) {
		lb := config.Blocks{local.TypeName: &local.Block{Workdir: workdir}}
		c.Sandbox.Profiles = map[string]config.Profile{
			"default": {Type: local.TypeName, Stateful: true, Blocks: lb},
			"oneshot": {Type: local.TypeName, Scope: "per_call", Blocks: lb},
		}
		if image != "" {
			c.Sandbox.Profiles["docker"] = config.Profile{Type: docker.TypeName, Stateful: true,
				Blocks: config.Blocks{docker.TypeName: &docker.Block{Image: image, Pull: "never"}}}
		}
		if quotas != nil {
			quotas(&c.Sandbox.Quotas)
		}
		// A fixed key: these gateways hold test secrets only.
		c.Secrets.Keys = []string{"py:" + base64.StdEncoding.EncodeToString([]byte("python-client-tests-secrets-key!"))}
	}})
}

// pythonEnv is the environment of a Python run against env as sub: the package from src/, no
// user site or cached login of this machine.
func pythonEnv(t *testing.T, env *gatewaytest.Env, sub string) []string {
	src, err := filepath.Abs("src")
	require.NoError(t, err)
	home := t.TempDir()
	return append(os.Environ(),
		"PYTHONPATH="+src, "PYTHONNOUSERSITE=1", "PYTHONDONTWRITEBYTECODE=1", "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"SANDGATE_URL="+env.URL, "SANDGATE_TOKEN="+env.Token(sub), "SANDGATE_API_KEY=")
}

func runPython(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), python, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	require.NoError(t, err, "python3 %s:\n%s", strings.Join(args, " "), out.String())
	return out.String()
}

// TestClientLive runs tests/ with pytest against a real gateway: the contract test, sessions
// and labels, commands with streamed output and a dropped connection resumed, stateful code
// and rich results (a matplotlib PNG on docker), files byte-exact, background tasks waited
// for and cancelled, standard input, typed problems, Retry-After on a rate-limited gateway,
// pause, resume and snapshots, the agent tools helper, and the CLI's cached login refreshed
// through the development issuer.
func TestClientLive(t *testing.T) {
	requirePython(t)
	image := dockerImage(t)
	env := start(t, image, nil)
	limited := start(t, "", func(q *config.Quotas) { q.RequestsPerSecond, q.RequestsBurst = 0.5, 2 })
	pyEnv := append(pythonEnv(t, env, "py-user"), "SANDGATE_TEST_RATE_LIMITED_URL="+limited.URL,
		"SANDGATE_TEST_RATE_LIMITED_TOKEN="+limited.Token("py-limited"),
		"SANDGATE_TEST_ISSUER="+env.Issuer.URL(), "SANDGATE_TEST_CLIENT_ID="+devissuer.ClientID)
	if image != "" {
		pyEnv = append(pyEnv, "SANDGATE_TEST_DOCKER_PROFILE=docker")
	}
	out := runPython(t, pyEnv, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", "tests")
	t.Log(out)
	require.Regexp(t, regexp.MustCompile(`\d+ passed`), out)
	require.NotContains(t, out, "failed")
}

// TestReadmeQuickstart runs the README's Python quickstart verbatim against a gateway, with
// SANDGATE_URL and SANDGATE_TOKEN set as the README says.
func TestReadmeQuickstart(t *testing.T) {
	requirePython(t)
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- python-quickstart:start -->\\s*```python\n(.*?)```\\s*<!-- python-quickstart:end -->").FindSubmatch(readme)
	require.NotNil(t, m, "README has no Python quickstart block")
	env := start(t, "", nil)
	script := filepath.Join(t.TempDir(), "quickstart.py")
	require.NoError(t, os.WriteFile(script, m[1], 0o644))
	out := runPython(t, pythonEnv(t, env, "quickstart"), script)
	t.Log(out)
	for _, want := range []string{"step 1\nstep 2\nstep 3\n", "42\n", "True\n"} {
		require.Contains(t, out, want)
	}
}
