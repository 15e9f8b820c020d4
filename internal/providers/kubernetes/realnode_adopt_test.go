package kubernetes_test

// An execution on a real pod survives its gateway: a `gateway dev` process whose default
// profile is kubernetes (the real node) is killed with SIGKILL while a command runs; the
// pod's sandboxd keeps running it, and a second gateway on the same database adopts the task
// and finishes it with the whole output (docs/semantics.md §9, "An execution survives its
// gateway"; cmd/gateway's TestKilledGatewaysTaskIsAdopted is the same on Docker).

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/devdb"
	"github.com/sandgate/sandgate/internal/providers/kubernetes"
)

func TestNodeKilledGatewaysTaskIsAdopted(t *testing.T) {
	if _, err := devdb.FindBin(); err != nil {
		t.Skip(err) // the node tests need root and the node's binaries; Postgres comes with make test
	}
	kubeconfig, ns, image := kubernetes.RealNode(t)
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755)) // the unprivileged Postgres user reaches it
	t.Cleanup(func() { _ = devdb.StopDir(filepath.Join(dir, "state", "pg")) })
	bin := filepath.Join(dir, "gateway")
	out, err := exec.Command("go", "build", "-o", bin, "../../../cmd/gateway").CombinedOutput()
	require.NoError(t, err, "building the gateway: %s", out)
	cfg := filepath.Join(dir, "sandgate.yaml")
	require.NoError(t, os.WriteFile(cfg, fmt.Appendf(nil, `
sandbox:
  default_profile: pods
  profiles:
    pods: {type: kubernetes, kubernetes: {kubeconfig: %q, namespace: %q, image: %q, create_timeout: 120}}
  broker: {lost_after: 2s}
`, kubeconfig, ns, image), 0o644))

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	g := startDevGateway(t, bin, dir, addr, "SANDGATE_CONFIG="+cfg)
	c := &httpClient{t: t, base: "http://" + addr, token: g.token}

	sid := c.json("POST", "/v1/sessions", `{"name":"survivor"}`, 201)["id"].(string)
	c.json("POST", "/v1/sessions/"+sid+"/commands", `{"command":"true"}`, 200) // the pod
	task := c.json("POST", "/v1/sessions/"+sid+"/commands",
		`{"command":"for i in 1 2 3 4 5 6; do echo tick $i; sleep 1; done; echo done >&2; exit 3","wait_s":0}`, 202)["id"].(string)
	// Killed once the execution runs in the pod (its first tick came on the live output): a
	// task is marked running before its execution reaches sandboxd.
	req, err := http.NewRequest("GET", c.base+"/v1/tasks/"+task+"/output", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && sc.Text() != "event: stdout" {
	}
	require.NoError(t, sc.Err())
	_ = resp.Body.Close()

	g.kill(syscall.SIGKILL)
	g2 := startDevGateway(t, bin, dir, addr, "SANDGATE_CONFIG="+cfg)
	c.token = g2.token
	deadline := time.Now().Add(2 * time.Minute)
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

	// The session goes on in the same pod.
	c.json("DELETE", "/v1/sessions/"+sid, "", 200)
}

type devGateway struct {
	cmd   *exec.Cmd
	token string
	done  chan struct{}
}

func (g *devGateway) kill(sig syscall.Signal) {
	_ = g.cmd.Process.Signal(sig)
	select {
	case <-g.done:
	case <-time.After(40 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
}

// startDevGateway runs `bin dev` with its state under dir on addr and returns once it printed
// its token; the test's end stops it.
func startDevGateway(t *testing.T, bin, dir, addr string, env ...string) *devGateway {
	t.Helper()
	base := "http://" + addr
	cmd := exec.Command(bin, "dev", "--data-dir", filepath.Join(dir, "state"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SANDGATE_SERVER__ADDR="+addr, "SANDGATE_SERVER__PUBLIC_URL="+base, "SANDGATE_LOG__LEVEL=warn",
		"XDG_CACHE_HOME="+filepath.Join(dir, "cache"))
	cmd.Env = append(cmd.Env, env...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	logf, err := os.OpenFile(filepath.Join(dir, "gateway.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	cmd.Stderr = logf
	require.NoError(t, cmd.Start())
	g := &devGateway{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(g.done) }()
	t.Cleanup(func() { g.kill(syscall.SIGTERM) })
	tokens := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if _, tok, ok := strings.Cut(sc.Text(), "export TOKEN="); ok {
				tokens <- strings.TrimSpace(tok)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case g.token = <-tokens:
	case <-g.done:
		log, _ := os.ReadFile(filepath.Join(dir, "gateway.log"))
		t.Fatalf("gateway dev exited before serving:\n%s", log)
	case <-time.After(3 * time.Minute):
		t.Fatal("gateway dev printed no token within 3 minutes")
	}
	return g
}

type httpClient struct {
	t     *testing.T
	base  string
	token string
}

func (c *httpClient) json(method, path, body string, want int) map[string]any {
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
	require.NoError(c.t, json.Unmarshal(b, &m))
	return m
}
