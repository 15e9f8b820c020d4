package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/devdb"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/testutil/dockertest"
)

var gatewayBin string

// testVersion is stamped into the test binary as `make build` stamps VERSION.
const testVersion = "v0.0.0-test+stamped"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandgate-bin-")
	if err != nil {
		panic(err)
	}
	gatewayBin = filepath.Join(dir, "gateway")
	if out, err := exec.Command("go", "build", "-ldflags", "-X main.version="+testVersion, "-o", gatewayBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building gateway: %v\n%s", err, out)
		os.Exit(1)
	}
	code := dockertest.CheckAfter(m).Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func requirePostgres(t *testing.T) {
	t.Helper()
	if _, err := devdb.FindBin(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// devGateway is a `gateway dev` process.
type devGateway struct {
	cmd          *exec.Cmd
	base         string
	token        string
	banner       string // stdout up to the token line
	installation string // its installation id, from the banner
	done         chan struct{}
}

// installationRE finds the installation id in dev's banner.
var installationRE = regexp.MustCompile(`(?m)^  installation: ([0-9a-f]{16}) `)

// dataDir returns a folder the unprivileged Postgres user can reach when tests run as root.
func dataDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	require.NoError(t, os.Chmod(d, 0o755))
	t.Cleanup(func() { _ = devdb.StopDir(filepath.Join(d, "state", "pg")) })
	return d
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// startDev runs `gateway dev` with its state in dir on addr and waits for its banner. When the
// test ends, the gateway is stopped and everything its installation made on the Docker engine
// is removed (the sandboxes of sessions the test left, also after killing a gateway on
// purpose); gateways sharing a database are one installation, and the first one started is
// stopped last.
func startDev(t *testing.T, dir, addr string, env ...string) *devGateway {
	t.Helper()
	base := "http://" + addr
	cmd := exec.Command(gatewayBin, "dev", "--data-dir", filepath.Join(dir, "state"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SANDGATE_SERVER__ADDR="+addr, "SANDGATE_SERVER__PUBLIC_URL="+base, "SANDGATE_LOG__LEVEL=warn",
		"XDG_CACHE_HOME="+filepath.Join(dir, "cache")) // where it records itself for `gateway token`: not the user's
	cmd.Env = append(cmd.Env, env...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	logf, err := os.Create(filepath.Join(dir, "gateway.log"))
	require.NoError(t, err)
	cmd.Stderr = logf
	require.NoError(t, cmd.Start())
	g := &devGateway{cmd: cmd, base: base, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(g.done) }()
	t.Cleanup(func() {
		g.kill(syscall.SIGTERM)
		if g.installation != "" {
			dockertest.Remove(t, g.installation)
		}
	})

	tokens := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var banner strings.Builder
		for sc.Scan() {
			banner.WriteString(sc.Text() + "\n")
			if _, tok, ok := strings.Cut(sc.Text(), "export TOKEN="); ok {
				tokens <- [2]string{strings.TrimSpace(tok), banner.String()}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case tb := <-tokens:
		g.token, g.banner = tb[0], tb[1]
		m := installationRE.FindStringSubmatch(g.banner)
		require.NotNil(t, m, "the banner names the installation:\n%s", g.banner)
		g.installation = m[1]
		dockertest.Register(g.installation)
	case <-g.done:
		log, _ := os.ReadFile(filepath.Join(dir, "gateway.log"))
		t.Fatalf("gateway dev exited before serving:\n%s", log)
	case <-time.After(2 * time.Minute):
		t.Fatal("gateway dev printed no token within 2 minutes")
	}
	return g
}

func (g *devGateway) kill(sig syscall.Signal) {
	if g.cmd.Process == nil {
		return
	}
	_ = g.cmd.Process.Signal(sig)
	select {
	case <-g.done:
	case <-time.After(40 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
}

// TestReadmeWalkthrough runs the README's curl walkthrough, verbatim but for the address,
// against `gateway dev` exactly as a newcomer would after `make run`.
func TestReadmeWalkthrough(t *testing.T) {
	requirePostgres(t)
	requireCurl(t)
	t.Parallel()
	dir := dataDir(t)
	g := startDev(t, dir, freeAddr(t))
	out := runWalkthrough(t, dir, g.base, g.token, true)
	require.Contains(t, out, `event: stdout`+"\n"+`data: {"data":"step 3\n","encoding":"utf-8","offset":14,"stream":"stdout"}`, "output streams live")
	require.DirExists(t, filepath.Join(dir, "state", "spool"), "dev keeps its completion spool in its data folder")
}

func requireCurl(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("curl is required: .ci/run installs it")
		}
		t.Skip("curl is not installed")
	}
}

// runWalkthrough runs the README's walkthrough block, verbatim but for the address, with TOKEN
// set, in dir, and checks each step's visible result; stateful says whether the gateway's
// default profile keeps code state (the second code call then prints the first one's variable).
func runWalkthrough(t *testing.T, dir, base, token string, stateful bool) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- walkthrough:start -->\\s*```sh\n(.*?)```\\s*<!-- walkthrough:end -->").FindSubmatch(readme)
	require.NotNil(t, m, "README has no walkthrough block")
	script := strings.ReplaceAll(string(m[1]), "http://localhost:8080", base)
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TOKEN="+token)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "walkthrough failed:\n%s", out)
	// The streamed step ends with its result event (live stdout events too, where the
	// execution runs in the gateway that streams: not with the queue flavor).
	wants := []string{`"subject":"dev"`, `"stdout":"42\n"`, "byte-exact", `"status":"succeeded"`, "finished", `"destroyed":true`,
		"event: result\ndata: ", `step 3\n`}
	if stateful {
		wants = append(wants, `"stdout":"still here: 42\n"`)
	}
	for _, want := range wants {
		require.Contains(t, string(out), want)
	}
	return string(out)
}

// TestReadmeWalkthroughOnDocker runs the same walkthrough with the dev gateway's docker profile
// as the default, on the local Docker engine.
func TestReadmeWalkthroughOnDocker(t *testing.T) {
	requirePostgres(t)
	if !docker.Available(t.Context(), "") {
		if os.Getenv("CI") == "true" {
			t.Fatal("no Docker engine: .ci/run starts one with scripts/docker-setup.sh")
		}
		t.Skip("no Docker engine reachable (scripts/docker-setup.sh starts one)")
	}
	requireCurl(t)
	t.Parallel()
	dir := dataDir(t)
	g := startDev(t, dir, freeAddr(t), "SANDGATE_SANDBOX__DEFAULT_PROFILE=docker")
	c := &client{t: t, base: g.base, token: g.token}
	require.Equal(t, "docker", c.json("GET", "/v1/sessions/default", "", 200)["profile"])
	runWalkthrough(t, dir, g.base, g.token, true)
}

// TestReadmeParkingOnDocker runs the pause, snapshot and preview block of docs/parking.md
// (linked from the README), verbatim but for the address, against `gateway dev` and its
// docker profile, as a newcomer would.
func TestReadmeParkingOnDocker(t *testing.T) {
	requirePostgres(t)
	if !docker.Available(t.Context(), "") {
		if os.Getenv("CI") == "true" {
			t.Fatal("no Docker engine: .ci/run starts one with scripts/docker-setup.sh")
		}
		t.Skip("no Docker engine reachable (scripts/docker-setup.sh starts one)")
	}
	requireCurl(t)
	t.Parallel()
	dir := dataDir(t)
	g := startDev(t, dir, freeAddr(t))
	page, err := os.ReadFile("../../docs/parking.md")
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)<!-- park:start -->\\s*```sh\n(.*?)```\\s*<!-- park:end -->").FindSubmatch(page)
	require.NotNil(t, m, "docs/parking.md has no park block")
	script := "B=" + g.base + "\nAUTH=\"Authorization: Bearer $TOKEN\"\n" + string(m[1])
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TOKEN="+g.token)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "park block failed:\n%s", out)
	for _, want := range []string{`"state":"paused"`, "https://sandgate.dev/problems/paused", `"state":"running"`, `"stdout":"42\n"`,
		`"stdout":"draft\n"`, "draft\ndraft\n", `"destroyed":true`} {
		require.Contains(t, string(out), want)
	}
}

// TestRestartMarksLostAndReattaches kills a gateway while a task runs: the next gateway on the
// same database reports the task lost and re-attaches to the session's sandbox.
func TestRestartMarksLostAndReattaches(t *testing.T) {
	requirePostgres(t)
	t.Parallel()
	dir := dataDir(t)
	addr := freeAddr(t)
	env := []string{"SANDGATE_SANDBOX__BROKER__LOST_AFTER=2s"}
	g := startDev(t, dir, addr, env...)
	c := &client{t: t, base: g.base, token: g.token}

	sid := c.json("POST", "/v1/sessions", `{"name":"survivor"}`, 201)["id"].(string)
	c.json("POST", "/v1/sessions/"+sid+"/commands", `{"command":"echo kept > state.txt"}`, 200)
	task := c.json("POST", "/v1/sessions/"+sid+"/commands", `{"command":"sleep 60","wait_s":0}`, 202)["id"].(string)

	g.kill(syscall.SIGKILL)
	g2 := startDev(t, dir, addr, env...)
	c.base = g2.base
	deadline := time.Now().Add(30 * time.Second)
	var st map[string]any
	for time.Now().Before(deadline) {
		st = c.json("GET", "/v1/tasks/"+task, "", 200)
		if st["status"] == "lost" {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	require.Equal(t, "lost", st["status"], "task after its gateway died: %v", st)
	require.Contains(t, st["error"], "stopped")

	res := c.json("POST", "/v1/sessions/"+sid+"/commands", `{"command":"cat state.txt"}`, 200)
	require.Equal(t, "kept\n", res["stdout"])
	require.Empty(t, res["notice"])
}

// TestKilledGatewaysTaskIsAdopted: kill -9 a gateway while a task runs on Docker and start
// it again: sandboxd kept the execution running, and the new gateway adopts the task and
// finishes it with the whole output (docs/semantics.md §9, "An execution survives its
// gateway").
func TestKilledGatewaysTaskIsAdopted(t *testing.T) {
	requirePostgres(t)
	if !docker.Available(t.Context(), "") {
		if os.Getenv("CI") == "true" {
			t.Fatal("no Docker engine: .ci/run starts one with scripts/docker-setup.sh")
		}
		t.Skip("no Docker engine reachable (scripts/docker-setup.sh starts one)")
	}
	t.Parallel()
	dir := dataDir(t)
	addr := freeAddr(t)
	env := []string{"SANDGATE_SANDBOX__BROKER__LOST_AFTER=2s", "SANDGATE_SANDBOX__DEFAULT_PROFILE=docker"}
	g := startDev(t, dir, addr, env...)
	c := &client{t: t, base: g.base, token: g.token}

	sid := c.json("POST", "/v1/sessions", `{"name":"survivor"}`, 201)["id"].(string)
	c.json("POST", "/v1/sessions/"+sid+"/commands", `{"command":"true"}`, 200) // the container
	task := c.json("POST", "/v1/sessions/"+sid+"/commands",
		`{"command":"for i in 1 2 3 4 5 6; do echo tick $i; sleep 1; done; echo done >&2; exit 3","wait_s":0}`, 202)["id"].(string)
	deadline := time.Now().Add(30 * time.Second)
	for c.json("GET", "/v1/tasks/"+task, "", 200)["status"] != "running" && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // a tick or two under the first gateway

	g.kill(syscall.SIGKILL)
	g2 := startDev(t, dir, addr, env...)
	c.base = g2.base
	deadline = time.Now().Add(90 * time.Second)
	var st map[string]any
	for time.Now().Before(deadline) {
		st = c.json("GET", "/v1/tasks/"+task, "", 200)
		if st["finished_at"] != nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	require.Equal(t, "succeeded", st["status"], "the task after its gateway died: %v", st)
	res := st["result"].(map[string]any)
	assert.Equal(t, "tick 1\ntick 2\ntick 3\ntick 4\ntick 5\ntick 6\n", res["stdout"], "the whole output")
	assert.Equal(t, "done\n", res["stderr"])
	assert.Equal(t, 3.0, res["exit_code"])
	assert.Contains(t, st["notice"], "another gateway")
}

type client struct {
	t     *testing.T
	base  string
	token string
}

func (c *client) json(method, path, body string, want int) map[string]any {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(c.t, want, resp.StatusCode, "%s %s: %s", method, path, b)
	var m map[string]any
	require.NoError(c.t, jsonUnmarshal(b, &m))
	return m
}
