package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/testutil/pgtest"
)

// balancer is a load balancer in front of gateway replicas: it sends every request to the
// first replica of its current list, which the test changes as replicas die.
type balancer struct {
	url string
	mu  sync.Mutex
	to  *url.URL
}

func newBalancer(t *testing.T) *balancer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &balancer{url: "http://" + ln.Addr().String()}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			b.mu.Lock()
			to := b.to
			b.mu.Unlock()
			r.SetURL(to)
			r.Out.Host = r.In.Host
		},
		FlushInterval: -1, // event streams pass at once
	}
	srv := &http.Server{Handler: proxy}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return b
}

func (b *balancer) route(base string) {
	u, _ := url.Parse(base)
	b.mu.Lock()
	b.to = u
	b.mu.Unlock()
}

// TestSurvivingReplicaAdoptsAndStreams: two gateway replicas behind a load balancer share a
// database and a Docker engine. A task runs on replica A; A is killed with SIGKILL and the
// balancer sends everything to B. B streams the task's output live (it follows the execution
// in its sandbox, though another replica started it), adopts the task once A's heartbeat is
// stale, and finishes it with the whole output.
func TestSurvivingReplicaAdoptsAndStreams(t *testing.T) {
	requirePostgres(t)
	requireDocker(t)
	t.Parallel()
	dir := dataDir(t)
	lb := newBalancer(t)
	cfg := fmt.Sprintf(`
database: {url: %q}
sandbox:
  default_profile: box
  profiles:
    box: {type: docker, docker: {image: sandgate/sandbox-python:latest, pull: never}}
  broker: {lost_after: 2s}
`, pgtest.URL(t))
	cfgPath := filepath.Join(dir, "sandgate.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(cfg), 0o644))
	// One data folder, so one development issuer key; one public URL, the balancer's.
	env := []string{"SANDGATE_CONFIG=" + cfgPath, "SANDGATE_SERVER__PUBLIC_URL=" + lb.url}
	a := startDev(t, dir, freeAddr(t), env...)
	lb.route(a.base)
	b := startDev(t, dir, freeAddr(t), env...)
	c := &client{t: t, base: lb.url, token: a.token}

	sid := c.json("POST", "/v1/sessions", `{"name":"replicated"}`, 201)["id"].(string)
	c.json("POST", "/v1/sessions/"+sid+"/commands", `{"command":"true"}`, 200) // the container
	task := c.json("POST", "/v1/sessions/"+sid+"/commands",
		`{"command":"for i in 1 2 3 4 5 6 7; do echo tick $i; sleep 1; done; while [ ! -e .go ]; do sleep 0.1; done; echo tick 8","wait_s":0}`, 202)["id"].(string)
	// Killed once the execution runs in its sandbox (its first tick came): a task is marked
	// running before its execution reaches sandboxd, and one killed in between never ran there.
	first := c.sse("GET", "/v1/tasks/"+task+"/output", "", nil)
	for ev := first.next(); ev.name != "stdout"; ev = first.next() {
	}
	_ = first.resp.Body.Close()

	a.kill(syscall.SIGKILL)
	lb.route(b.base)

	// B streams it live from the sandbox: ticks arrive while it still runs.
	s := c.sse("GET", "/v1/tasks/"+task+"/output", "", nil)
	var seen strings.Builder
	for !strings.Contains(seen.String(), "tick 7") {
		ev := s.next()
		if ev.name == "stdout" {
			seen.WriteString(ev.output(t))
		}
		require.NotEqual(t, "result", ev.name, "the result came before the live ticks: %q", seen.String())
		require.NotEqual(t, "error", ev.name, "the stream failed after %q: %s", seen.String(), ev.data)
	}
	// The program waits after tick 7 until the test lets it go (a file made beside it through
	// the engine: the session's own file operations would wait for the task), so "running"
	// does not depend on how fast a loaded machine delivers the ticks.
	assert.Equal(t, "running", c.json("GET", "/v1/tasks/"+task, "", 200)["status"], "tick 7 was live")
	box := c.json("GET", "/v1/sessions/"+sid, "", 200)["sandbox_id"].(string)
	out, err := exec.Command("docker", "exec", box, "touch", "/workspace/.go").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var result event
	for result = s.next(); result.name != "result"; result = s.next() {
	}
	var res map[string]any
	require.NoError(t, json.Unmarshal([]byte(result.data), &res))
	want := ""
	for i := 1; i <= 8; i++ {
		want += fmt.Sprintf("tick %d\n", i)
	}
	assert.Equal(t, want, res["stdout"], "the whole output, though its first replica died")

	st := c.json("GET", "/v1/tasks/"+task, "", 200)
	assert.Equal(t, "succeeded", st["status"])
	assert.Contains(t, st["notice"], "another gateway", "B adopted it")
}
