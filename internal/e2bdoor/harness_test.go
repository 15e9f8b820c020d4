package e2bdoor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/e2bdoor"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/local"
	"github.com/sandgate/sandgate/internal/testutil/dockertest"
)

// TestMain fails the package when a test leaves a goroutine behind (a gateway not closed, a
// response body not drained), and checks that the docker suites left nothing on the engine.
func TestMain(m *testing.M) { goleak.VerifyTestMain(dockertest.CheckAfter(m)) }

// sdkDir holds the node project that drives the door with E2B's official SDKs (door.mjs); its
// node_modules are installed by scripts/test-setup.sh (npm ci from its package-lock.json).
var sdkDir = filepath.Join("testdata", "sdk")

// skipOrFail skips the test with reason, or fails it under CI=true, where every suite must run.
func skipOrFail(t *testing.T, reason string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: %s", reason)
	}
	t.Skip(reason)
}

// door is a gateway with the E2B door enabled.
type door struct {
	*gatewaytest.Env
	t *testing.T
}

// localDoor is a gateway whose profiles run on the local provider: "default", "restricted"
// (group ml only) and "nonet" (egress denied).
func localDoor(t *testing.T, adjust func(*config.Config)) *door {
	t.Helper()
	workdir := t.TempDir()
	e := gatewaytest.Start(t, gatewaytest.Options{Workdir: workdir, MaxConns: 10, Config: func(c *config.Config) {
		lb := config.Blocks{local.TypeName: &local.Block{Workdir: workdir}}
		c.Sandbox.Profiles = map[string]config.Profile{
			"default":    {Type: local.TypeName, Blocks: lb},
			"restricted": {Type: local.TypeName, AllowedGroups: []string{"ml"}, Blocks: lb},
			"nonet":      {Type: local.TypeName, Policy: config.Policy{NetworkEgress: "deny"}, Blocks: lb},
		}
		c.Server.E2B.Enabled = true
		if adjust != nil {
			adjust(c)
		}
	}})
	return &door{Env: e, t: t}
}

// dockerDoor is a gateway whose "default" profile runs docker sandboxes of the sandbox image
// (stateful, pausable), and "other" too.
func dockerDoor(t *testing.T, adjust func(*config.Config)) *door {
	t.Helper()
	image := dockerImage(t)
	e := gatewaytest.Start(t, gatewaytest.Options{MaxConns: 10, Config: func(c *config.Config) {
		blocks := config.Blocks{docker.TypeName: &docker.Block{Image: image, Pull: "never"}}
		c.Sandbox.Profiles = map[string]config.Profile{
			"default": {Type: docker.TypeName, Stateful: true, Blocks: blocks},
		}
		c.Server.E2B.Enabled = true
		if adjust != nil {
			adjust(c)
		}
	}})
	return &door{Env: e, t: t}
}

// dockerImage is the sandbox image of the docker tests ($SANDGATE_DOCKER_TEST_IMAGE, else
// sandgate/sandbox-python:latest, which scripts/docker-setup.sh builds).
func dockerImage(t *testing.T) string {
	t.Helper()
	img := os.Getenv("SANDGATE_DOCKER_TEST_IMAGE")
	if img == "" {
		img = "sandgate/sandbox-python:latest"
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if !docker.Available(ctx, "") {
		skipOrFail(t, "no Docker engine is reachable (run scripts/docker-setup.sh)")
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		skipOrFail(t, "no Docker client: "+err.Error())
	}
	defer cli.Close()
	if _, err := cli.ImageInspect(ctx, img); err != nil {
		skipOrFail(t, "the sandbox image "+img+" is missing (run scripts/docker-setup.sh): "+err.Error())
	}
	return img
}

// key makes an API key for subject sub (in groups) limited to profiles (nil: any), and
// returns its id and secret.
func (d *door) key(sub string, groups []string, profiles []string) (string, string) {
	d.t.Helper()
	body := map[string]any{"name": "e2b"}
	if profiles != nil {
		body["profiles"] = profiles
	}
	b, err := json.Marshal(body)
	require.NoError(d.t, err)
	status, _, reply := d.Do("POST", "/v1/api-keys", d.Token(sub, groups...), bytes.NewReader(b), map[string]string{"Content-Type": "application/json"})
	require.Equal(d.t, http.StatusCreated, status, "body: %s", reply)
	var k struct{ ID, Secret string }
	require.NoError(d.t, json.Unmarshal(reply, &k))
	return k.ID, k.Secret
}

// revoke revokes key id of sub.
func (d *door) revoke(sub, id string) {
	d.t.Helper()
	status, _, reply := d.Do("DELETE", "/v1/api-keys/"+id, d.Token(sub), nil, nil)
	require.Equal(d.t, http.StatusOK, status, "body: %s", reply)
}

// sdk runs scenario of door.mjs with E2B's JavaScript SDKs pointed at the door with key, args
// as its further arguments, and decodes the one JSON object it prints into out.
func (d *door) sdk(key, scenario string, out any, args ...string) {
	d.t.Helper()
	d.sdkScript("door.mjs", key, out, append([]string{scenario}, args...)...)
}

// sdkScript runs script with args as sdk runs door.mjs.
func (d *door) sdkScript(script, key string, out any, args ...string) {
	d.t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		skipOrFail(d.t, "node is not installed (Node 20 runs E2B's SDKs)")
	}
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules", "@e2b", "code-interpreter")); err != nil {
		skipOrFail(d.t, "E2B's SDKs are not installed: run scripts/test-setup.sh (npm ci in "+sdkDir+")")
	}
	ctx, cancel := context.WithTimeout(d.t.Context(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{script}, args...)...)
	cmd.Dir = sdkDir
	// Only the variables E2B's documentation names for a self-hosted server.
	cmd.Env = append(os.Environ(), "E2B_API_URL="+d.URL+e2bdoor.Path, "E2B_SANDBOX_URL="+d.URL+e2bdoor.Path, "E2B_API_KEY="+key)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(d.t, cmd.Run(), "%s %v failed: %s\nstdout: %s", script, args, stderr.String(), stdout.String())
	require.NoError(d.t, json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), out), "%s %v printed: %s\nstderr: %s", script, args, stdout.String(), stderr.String())
}

// thrown is what door.mjs reports of an exception: its class and message.
type thrown struct {
	Name       string `json:"name"`
	Message    string `json:"message"`
	StatusCode int    `json:"statusCode"`
}

func (e thrown) has(words ...string) bool {
	for _, w := range words {
		if !strings.Contains(e.Message, w) {
			return false
		}
	}
	return true
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

// bracketed is door.mjs's check of a sandbox's end against the moments around the call that
// set it (times in ms since the epoch).
type bracketed struct {
	Within             bool
	Before, After, End int64
}
