package docker_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/sandboxd"
	"github.com/sandgate/sandgate/internal/testutil/dockertest"
)

// testInstallation is the installation of the providers the tests build, one per test
// binary: after the tests, anything of it left on the engine fails the package.
var testInstallation = providers.NewInstallationID()

func TestMain(m *testing.M) {
	removeStaleTestContainers()
	dockertest.Register(testInstallation)
	goleak.VerifyTestMain(dockertest.CheckAfter(m))
}

// testImage is the sandbox image the tests run; scripts/docker-setup.sh builds it.
var testImage = envOr("SANDGATE_DOCKER_TEST_IMAGE", "sandgate/sandbox-python:latest")

// testGrace is sandboxd's, which kills a timed-out execution in every docker sandbox.
const testGrace = sandboxd.DefaultKillGrace

var (
	agent     = providers.Principal{Mode: "agent", Subject: "docker-test"}
	allowPol  = providers.Policy{NetworkEgress: providers.EgressAllow, Timeout: time.Minute, Strict: true}
	quietLogs = slog.New(slog.DiscardHandler)
)

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

var (
	engineOnce   sync.Once
	engineReason string // why the engine tests cannot run; "" when they can
)

// requireEngine skips the test when no engine (or no test image) is available, and fails it
// instead when CI=true.
func requireEngine(t *testing.T) {
	t.Helper()
	engineOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if !docker.Available(ctx, "") {
			engineReason = "no Docker engine is reachable (run scripts/docker-setup.sh)"
			return
		}
		cli := engineClient(t)
		defer cli.Close()
		if _, err := cli.ImageInspect(ctx, testImage); err != nil {
			engineReason = "the test image " + testImage + " is missing (run scripts/docker-setup.sh): " + err.Error()
		}
	})
	if engineReason == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and %s", engineReason)
	}
	t.Skip(engineReason)
}

// engineClient is a raw engine client for checks from the outside.
func engineClient(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	return cli
}

// testProfile returns a profile name unique to the test, so sweeps and pools of parallel
// tests do not meet.
func testProfile(t *testing.T) string {
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 30 {
		name = name[len(name)-30:]
	}
	return "t-" + strings.Trim(name, "-") + "-" + randomSuffix()
}

var suffixN atomic.Int64

func randomSuffix() string {
	return time.Now().Format("150405") + "-" + strconv.FormatInt(suffixN.Add(1), 10)
}

// newProvider builds a provider for the test image, closed when the test ends.
func newProvider(t *testing.T, mutate ...func(*docker.Options)) *docker.Provider {
	t.Helper()
	requireEngine(t)
	opts := docker.Options{
		Profile:      testProfile(t),
		Installation: testInstallation,
		Config:       docker.Config{Image: testImage, NeverPull: true},
		Policy:       allowPol,
		Logger:       quietLogs,
	}
	for _, m := range mutate {
		m(&opts)
	}
	p, err := docker.New(opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = p.Close()
		removeProfileContainers(t, opts.Profile)
	})
	return p
}

// removeProfileContainers force-removes every container of profile, whatever state the test
// left it in (ready warm-pool containers, sandboxes of a test that failed before its own
// clean-up was registered), so a failing test leaves nothing on the engine.
func removeProfileContainers(t *testing.T, profile string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := engineClient(t)
	defer cli.Close()
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", docker.LabelManagedBy+"="+docker.ManagedBy),
		filters.Arg("label", docker.LabelProfile+"="+profile),
	)})
	if err != nil {
		t.Logf("listing the containers of profile %s: %v", profile, err)
		return
	}
	for _, c := range list {
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Logf("removing container %s of profile %s: %v", c.ID, profile, err)
		}
	}
}

// removeStaleTestContainers removes what an interrupted earlier run (a test binary killed by
// its timeout runs no clean-up) left behind: containers of test profiles (names
// sandgate-t-… and sandgate-test-…) older than an hour, so that concurrent runs keep theirs.
func removeStaleTestContainers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if !docker.Available(ctx, "") {
		return
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return
	}
	defer cli.Close()
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("name", "^/sandgate-t"))})
	if err != nil {
		return
	}
	cutoff := time.Now().Add(-time.Hour).Unix()
	for _, c := range list {
		if c.Created < cutoff {
			_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		}
	}
}

// create makes a sandbox destroyed when the test ends.
func create(t *testing.T, p *docker.Provider, pol providers.Policy) providers.Sandbox {
	t.Helper()
	sb, err := p.Create(t.Context(), agent, pol)
	require.NoError(t, err)
	id := sb.ID()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = sb.Close()
		assert.NoError(t, p.Destroy(ctx, id))
	})
	return sb
}

// result of one execution.
type result struct {
	st             providers.ExitStatus
	err            error
	stdout, stderr string
	elapsed        time.Duration
}

func run(t *testing.T, sb providers.Sandbox, spec providers.ExecSpec) result {
	t.Helper()
	var out, errOut bytes.Buffer
	spec.Output = providers.Output{Stdout: &out, Stderr: &errOut}
	if spec.Timeout == 0 {
		spec.Timeout = time.Minute
	}
	start := time.Now()
	st, err := sb.Exec(t.Context(), spec)
	return result{st: st, err: err, stdout: out.String(), stderr: errOut.String(), elapsed: time.Since(start)}
}

// sh runs command and requires exit 0; it returns stdout.
func sh(t *testing.T, sb providers.Sandbox, command string) string {
	t.Helper()
	r := run(t, sb, providers.ExecSpec{Command: command})
	require.NoError(t, r.err, command)
	require.Equal(t, 0, r.st.ExitCode, "%s: stderr %s", command, r.stderr)
	return r.stdout
}

func readAll(t *testing.T, sb providers.Sandbox, path string) string {
	t.Helper()
	rc, err := sb.ReadFile(t.Context(), path)
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return string(b)
}

// inspect inspects a container from the outside.
func inspect(t *testing.T, id string) (container.InspectResponse, error) {
	t.Helper()
	cli := engineClient(t)
	defer cli.Close()
	return cli.ContainerInspect(t.Context(), id)
}
