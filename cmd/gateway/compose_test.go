package main

// The repository's docker-compose.yml, with the real Compose CLI: `docker compose config` (or
// docker-compose v1, which Debian packages) must accept it and produce the gateway, Postgres
// and the sandbox image with the Docker socket and a configuration the gateway accepts; and,
// with a Docker engine, `up` must bring up a gateway that serves the README walkthrough on its
// docker profile.
//
// The machine cannot pull images, so the bring-up uses the compose file's two image variables
// to substitute local images for the two it would pull or build from pulled bases: the
// gateway image is the sandbox image (images/sandbox/build.sh, Debian bookworm without a
// registry) plus this package's gateway binary, and postgres:16 is replaced by Debian's
// PostgreSQL 15 installed on the same base (deploy/compose/testdata/postgres). Everything else
// — the services, the dependency conditions, the health checks, the socket and volume mounts,
// the environment, `gateway dev` with the compose configuration, `gateway token` inside the
// container — is the compose file's own. What this does not cover: the root Dockerfile and
// images/sandbox/Dockerfile builds (their base images need a registry) and postgres:16 itself.

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sandgate/sandgate/internal/gateway"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/testutil/dockertest"
)

const repoRoot = "../.."

// composeCLI returns the Compose command line: the `docker compose` plugin, else Debian's
// docker-compose (v1). Without either the test skips (under CI=true it fails:
// scripts/test-setup.sh installs docker-compose).
func composeCLI(t *testing.T) []string {
	t.Helper()
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}
	}
	msg := "neither `docker compose` nor docker-compose is installed (apt-get install docker-compose; scripts/test-setup.sh does)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return nil
}

// compose runs the Compose CLI on the repository's docker-compose.yml with project name
// project and env added to this process's environment, and returns its standard output.
func compose(t *testing.T, cli []string, project string, env []string, args ...string) string {
	t.Helper()
	out, err := tryCompose(cli, project, env, args...)
	require.NoError(t, err, "%s %s", strings.Join(cli, " "), strings.Join(args, " "))
	return out
}

func tryCompose(cli []string, project string, env []string, args ...string) (string, error) {
	full := slices.Concat(cli[1:], []string{"--project-directory", repoRoot, "-f", filepath.Join(repoRoot, "docker-compose.yml")})
	if project != "" {
		full = append(full, "-p", project)
	}
	cmd := exec.Command(cli[0], append(full, args...)...)
	cmd.Env = append(composeEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w\n%s%s", err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// composeEnv is this process's environment without the variables the compose file reads or
// that would change the gateway's configuration.
func composeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "SANDGATE_") || name == "DOCKER_SOCKET" || name == "COMPOSE_FILE" || name == "COMPOSE_PROJECT_NAME" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// service is the part of a service of `compose config` this test reads. Compose v1 prints the
// short syntax of ports and volumes, v2 the long one: both are accepted.
type service struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Entrypoint  []string          `yaml:"entrypoint"`
	User        string            `yaml:"user"`
	WorkingDir  string            `yaml:"working_dir"`
	ReadOnly    bool              `yaml:"read_only"`
	CapDrop     []string          `yaml:"cap_drop"`
	SecurityOpt []string          `yaml:"security_opt"`
	Environment map[string]string `yaml:"environment"`
	Build       *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Volumes     []yaml.Node `yaml:"volumes"`
	Ports       []yaml.Node `yaml:"ports"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

// mounts returns the service's volumes as target → source.
func (s service) mounts(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range s.Volumes {
		switch n.Kind {
		case yaml.ScalarNode: // source:target[:mode]
			parts := strings.Split(n.Value, ":")
			require.GreaterOrEqual(t, len(parts), 2, n.Value)
			out[parts[1]] = parts[0]
		default:
			var v struct{ Source, Target string }
			require.NoError(t, n.Decode(&v))
			out[v.Target] = v.Source
		}
	}
	return out
}

// published returns the service's ports as "host_ip:published->target".
func (s service) published(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, n := range s.Ports {
		switch n.Kind {
		case yaml.ScalarNode: // host_ip:published:target[/proto]
			parts := strings.Split(strings.TrimSuffix(n.Value, "/tcp"), ":")
			require.Len(t, parts, 3, n.Value)
			out = append(out, parts[0]+":"+parts[1]+"->"+parts[2])
		default:
			var v struct {
				HostIP    string `yaml:"host_ip"`
				Published string `yaml:"published"`
				Target    int    `yaml:"target"`
			}
			require.NoError(t, n.Decode(&v))
			out = append(out, fmt.Sprintf("%s:%s->%d", v.HostIP, v.Published, v.Target))
		}
	}
	return out
}

// composeConfig runs `compose config` with env and decodes its services.
func composeConfig(t *testing.T, cli []string, env ...string) map[string]service {
	t.Helper()
	out := compose(t, cli, "", env, "config")
	var doc struct {
		Services map[string]service `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(out), &doc), out)
	return doc.Services
}

func TestComposeConfig(t *testing.T) {
	cli := composeCLI(t)
	services := composeConfig(t, cli)
	require.ElementsMatch(t, []string{"postgres", "sandbox-image", "gateway"}, mapKeys(services))

	pg := services["postgres"]
	assert.Equal(t, "postgres:16", pg.Image)
	assert.Equal(t, "sandgate", pg.Environment["POSTGRES_DB"])
	assert.Contains(t, pg.mounts(t), "/var/lib/postgresql/data", "a named volume keeps the data")
	assert.Empty(t, pg.Ports, "Postgres is not published")

	sbx := services["sandbox-image"]
	assert.Equal(t, "sandgate/sandbox-python:latest", sbx.Image, "the image the docker profiles run")
	require.NotNil(t, sbx.Build)
	assert.Equal(t, "images/sandbox/Dockerfile", sbx.Build.Dockerfile)

	gw := services["gateway"]
	assert.Equal(t, "sandgate/gateway:dev", gw.Image)
	require.NotNil(t, gw.Build, "built from the repository's Dockerfile")
	assert.FileExists(t, filepath.Join(gw.Build.Context, "Dockerfile"))
	assert.Equal(t, []string{"dev"}, gw.Command, "the development issuer: tokens without an identity provider")
	assert.Equal(t, []string{"127.0.0.1:8080->8080"}, gw.published(t), "the dev issuer signs anyone in: loopback only")
	assert.True(t, gw.ReadOnly)
	assert.Equal(t, []string{"ALL"}, gw.CapDrop)
	assert.Contains(t, gw.SecurityOpt, "no-new-privileges:true")
	assert.Equal(t, "service_healthy", gw.DependsOn["postgres"].Condition)
	assert.Equal(t, "service_completed_successfully", gw.DependsOn["sandbox-image"].Condition)
	require.NotNil(t, gw.Healthcheck)
	assert.Contains(t, strings.Join(gw.Healthcheck.Test, " "), "/readyz")
	mounts := gw.mounts(t)
	assert.Equal(t, "/var/run/docker.sock", mounts["/var/run/docker.sock"], "the Docker socket")
	cfgFile := mounts["/etc/sandgate/sandgate.yaml"]
	require.NotEmpty(t, cfgFile, "the configuration is mounted")
	assert.FileExists(t, cfgFile)
	assert.Equal(t, "/etc/sandgate/sandgate.yaml", gw.Environment["SANDGATE_CONFIG"])
	assert.Contains(t, gw.Environment["SANDGATE_DATABASE__URL"], "@postgres:5432/sandgate")

	// The mounted configuration with the compose file's environment is one the gateway accepts:
	// its own loader, then `gateway config validate` (which also checks the provider names).
	var env []string
	for k, v := range gw.Environment {
		env = append(env, k+"="+v)
	}
	env = append(env, "SANDGATE_CONFIG="+cfgFile)
	cfg, err := gateway.LoadConfig(cfgFile, env, gateway.Builtin())
	require.NoError(t, err)
	assert.Equal(t, "0.0.0.0:8080", cfg.Server.Addr, "reachable through the published port")
	assert.Equal(t, "http://localhost:8080", cfg.Server.PublicURL)
	def := cfg.Sandbox.Profiles[cfg.Sandbox.DefaultProfile]
	assert.Equal(t, "docker", def.Type)
	block, ok := def.Blocks[docker.TypeName].(*docker.Block)
	require.True(t, ok, "the docker block, decoded: %#v", def.Blocks)
	assert.Equal(t, sbx.Image, block.Image)
	require.NotNil(t, block.Sandboxd)
	assert.Equal(t, "exec", block.Sandboxd.Transport, "the gateway is not on the engine's host file system")
	cmd := exec.Command(gatewayBin, "config", "validate")
	cmd.Env = append(composeEnv(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "gateway config validate: %s", out)

	// The variables move the port and swap images; the port is the same inside and out, since
	// the gateway discovers its own issuer at the public URL.
	moved := composeConfig(t, cli, "SANDGATE_PORT=18080", "SANDGATE_GATEWAY_IMAGE=gw:local", "SANDGATE_POSTGRES_IMAGE=pg:local", "DOCKER_SOCKET=/run/user/1000/docker.sock")
	assert.Equal(t, []string{"127.0.0.1:18080->18080"}, moved["gateway"].published(t))
	assert.Equal(t, "0.0.0.0:18080", moved["gateway"].Environment["SANDGATE_SERVER__ADDR"])
	assert.Equal(t, "http://localhost:18080", moved["gateway"].Environment["SANDGATE_SERVER__PUBLIC_URL"])
	assert.Equal(t, "gw:local", moved["gateway"].Image)
	assert.Equal(t, "pg:local", moved["postgres"].Image)
	assert.Equal(t, "/run/user/1000/docker.sock", moved["gateway"].mounts(t)["/var/run/docker.sock"])
}

func mapKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// dockerImageID returns the id of a local image, "" when there is none.
func dockerImageID(ref string) string {
	out, err := exec.Command("docker", "image", "inspect", "-f", "{{.Id}}", ref).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// dockerBuild builds dir's Dockerfile into tag with the classic builder (no registry is
// needed for a local base image).
func dockerBuild(t *testing.T, dir, tag string, args ...string) {
	t.Helper()
	cmd := exec.Command("docker", slices.Concat([]string{"build", "-q", "-t", tag}, args, []string{dir})...)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "docker build %s: %s", tag, out)
}

// localPostgresImage builds (once per content and base) the stand-in for postgres:16.
func localPostgresImage(t *testing.T, base string) string {
	t.Helper()
	dir := filepath.Join(repoRoot, "deploy", "compose", "testdata", "postgres")
	h := sha256.New()
	for _, f := range []string{"Dockerfile", "entrypoint.sh"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		h.Write(b)
	}
	h.Write([]byte(dockerImageID(base)))
	tag := "sandgate/compose-postgres:" + hex.EncodeToString(h.Sum(nil))[:12]
	if dockerImageID(tag) == "" {
		t.Logf("building %s from %s (Debian's postgresql-15 from the apt mirror; a minute or two, once)", tag, base)
		// Host networking for the build: apt reaches the mirror even when the engine's
		// containers have no route out (scripts/docker-setup.sh's fallbacks).
		dockerBuild(t, dir, tag, "--network", "host", "--build-arg", "BASE="+base)
	}
	return tag
}

// localGatewayImage builds a gateway image from the sandbox image and a static build of this
// package, tagged uniquely and removed after the test.
func localGatewayImage(t *testing.T, base string) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "gateway"), ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(
		"FROM "+base+"\nCOPY gateway /usr/local/bin/gateway\nENTRYPOINT [\"/usr/local/bin/gateway\"]\nCMD [\"serve\"]\n"), 0o644))
	var b [4]byte
	_, _ = rand.Read(b[:])
	tag := "sandgate/gateway:compose-test-" + hex.EncodeToString(b[:])
	dockerBuild(t, dir, tag)
	t.Cleanup(func() { _ = exec.Command("docker", "image", "rm", "-f", tag).Run() })
	return tag
}

// TestComposeUp brings the compose file up on the local engine with local images (see the top
// of this file), mints a token inside the gateway container and runs the README walkthrough
// against it: sessions and executions in sandbox containers the gateway creates through the
// mounted socket, stateful code, binary files, a task past the wait, streaming.
func TestComposeUp(t *testing.T) {
	cli := composeCLI(t)
	requireDocker(t)
	requireCurl(t)
	const sandboxImage = "sandgate/sandbox-python:latest"
	if dockerImageID(sandboxImage) == "" {
		msg := sandboxImage + " is missing: images/sandbox/build.sh builds it (scripts/docker-setup.sh runs it)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Parallel()
	pgImage := localPostgresImage(t, sandboxImage)
	gwImage := localGatewayImage(t, sandboxImage)

	_, port, _ := strings.Cut(freeAddr(t), "127.0.0.1:")
	var b [4]byte
	_, _ = rand.Read(b[:])
	project := "sgcompose" + hex.EncodeToString(b[:])
	env := []string{"SANDGATE_PORT=" + port, "SANDGATE_GATEWAY_IMAGE=" + gwImage, "SANDGATE_POSTGRES_IMAGE=" + pgImage}
	var installation string // of the gateway, whose sandboxes the database's removal orphans
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := tryCompose(cli, project, env, "logs", "--no-color")
			t.Logf("compose logs:\n%s", logs)
		}
		if installation == "" {
			installation = composeInstallation(cli, project, env)
		}
		if _, err := tryCompose(cli, project, env, "down", "-v", "--remove-orphans", "-t", "20"); err != nil {
			t.Logf("compose down: %v", err)
		}
		if installation != "" {
			dockertest.Remove(t, installation)
		}
	})
	compose(t, cli, project, env, "up", "-d", "--no-build")

	base := "http://127.0.0.1:" + port
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "the gateway was not ready within 3 minutes (last: %v)", err)
		time.Sleep(time.Second)
	}
	installation = composeInstallation(cli, project, env)
	require.NotEmpty(t, installation, "the gateway's banner names its installation")
	dockertest.Register(installation)
	token := strings.TrimSpace(compose(t, cli, project, env, "exec", "-T", "gateway", "gateway", "token"))
	require.NotEmpty(t, token)
	c := &client{t: t, base: base, token: token}

	// The default profile's sandbox is a container the gateway made through the mounted
	// socket, next to its own: the engine has a container of the compose configuration's
	// default profile with the file just written in its workspace.
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	marker := hex.EncodeToString(nonce[:])
	res := c.json("POST", "/v1/sessions/default/commands", `{"command":"echo `+marker+` > compose-marker"}`, 200)
	assert.EqualValues(t, 0, res["exit_code"])
	ids, err := exec.Command("docker", "ps", "-q", "--filter", "label=sandgate.profile=default",
		"--filter", "label=sandgate.sandboxd-transport=exec", "--filter", "ancestor=sandgate/sandbox-python:latest").Output()
	require.NoError(t, err)
	found := false
	for _, id := range strings.Fields(string(ids)) {
		out, err := exec.Command("docker", "exec", id, "cat", "/workspace/compose-marker").Output()
		found = found || (err == nil && strings.TrimSpace(string(out)) == marker)
	}
	assert.True(t, found, "no sandbox container on the engine holds the marker")
	c.json("DELETE", "/v1/sessions/"+res["session_id"].(string), "", 200)

	runWalkthrough(t, t.TempDir(), base, token, true)
}

// composeInstallation reads the installation id from the compose gateway's banner ("" when it
// has not printed it).
func composeInstallation(cli []string, project string, env []string) string {
	logs, _ := tryCompose(cli, project, env, "logs", "--no-color", "gateway")
	if m := composeInstallationRE.FindStringSubmatch(logs); m != nil {
		return m[1]
	}
	return ""
}

var composeInstallationRE = regexp.MustCompile(`installation: ([0-9a-f]{16}) \(`)
