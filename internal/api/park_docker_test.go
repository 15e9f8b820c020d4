package api_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// dockerImage is the sandbox image of the docker tests; scripts/docker-setup.sh builds it
// (images/sandbox/build.sh), with the sandboxd of this tree.
func dockerImage(t *testing.T) string {
	t.Helper()
	img := os.Getenv("SANDGATE_DOCKER_TEST_IMAGE")
	if img == "" {
		img = "sandgate/sandbox-python:latest"
	}
	reason := ""
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if !docker.Available(ctx, "") {
		reason = "no Docker engine is reachable (run scripts/docker-setup.sh)"
	} else if cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation()); err != nil {
		reason = "no Docker client: " + err.Error()
	} else {
		defer cli.Close()
		if _, err := cli.ImageInspect(ctx, img); err != nil {
			reason = "the sandbox image " + img + " is missing (run images/sandbox/build.sh): " + err.Error()
		}
	}
	if reason != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %s", reason)
		}
		t.Skip(reason)
	}
	return img
}

// TestParkOnDocker drives pause, resume, idle_action pause and snapshot, snapshots and
// preview ports through the API on the real Docker engine, with a manual clock.
func TestParkOnDocker(t *testing.T) {
	t.Parallel()
	img := dockerImage(t)
	e, clock := parkEnv(t, func(c *config.Config) {
		block := func() config.Blocks {
			return config.Blocks{docker.TypeName: &docker.Block{Image: img, Pull: "never"}}
		}
		c.Sandbox.Profiles["docker"] = config.Profile{Type: docker.TypeName, Stateful: true, IdleTimeout: 60, IdleAction: config.IdlePause, Blocks: block()}
		c.Sandbox.Profiles["docker-park"] = config.Profile{Type: docker.TypeName, Stateful: true, IdleTimeout: 60, IdleAction: config.IdleSnapshot, Blocks: block()}
	})
	alice, bob := e.token("alice"), e.token("bob")
	var sessions []string
	t.Cleanup(func() {
		for _, sid := range sessions {
			e.do(alice, "DELETE", "/v1/sessions/"+sid, nil)
		}
		snaps, _ := e.do(alice, "GET", "/v1/snapshots", nil).JSON(t)["snapshots"].([]any)
		for _, s := range snaps {
			e.do(alice, "DELETE", "/v1/snapshots/"+s.(map[string]any)["id"].(string), nil)
		}
	})
	newSession := func(profile string) string {
		sid := e.newSession(alice, profile)
		sessions = append(sessions, sid)
		return sid
	}
	code := func(sid, src string) map[string]any {
		t.Helper()
		r := e.do(alice, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": src})
		require.Equal(t, 200, r.Status, "body: %s", r.Body)
		return r.JSON(t)
	}

	sid := newSession("docker")
	code(sid, "answer = 42")
	e.run(alice, sid, "cat > server.py <<'EOF'\n"+previewServer+"EOF\necho '<h1>hello preview</h1>' > index.html")
	r := e.do(alice, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "exec python3 server.py 8000", "background": true})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	server := r.JSON(t)["id"].(string)
	require.Eventually(t, func() bool {
		return e.do(alice, "GET", "/v1/sessions/"+sid+"/ports/8000/index.html", nil).Status == 200
	},
		30*time.Second, 100*time.Millisecond, "the server in the container answers through sandboxd")

	t.Run("preview", func(t *testing.T) {
		checkPreview(t, e, clock, alice, bob, sid, 8000)
	})

	t.Run("pause and resume", func(t *testing.T) {
		r := e.do(alice, "POST", "/v1/sessions/"+sid+"/pause", nil)
		require.Equal(t, 200, r.Status, "body: %s", r.Body)
		m := r.JSON(t)
		assert.Equal(t, "paused", m["state"])
		assert.Nil(t, m["warnings"])
		ins, err := inspectContainer(t, m["sandbox_id"].(string))
		require.NoError(t, err)
		assert.True(t, ins.State.Paused, "the container is frozen")
		list := e.do(alice, "GET", "/v1/sessions", nil).JSON(t)["sessions"].([]any)
		for _, s := range list {
			if s.(map[string]any)["id"] == sid {
				assert.Equal(t, "paused", s.(map[string]any)["state"])
			}
		}
		requireProblem(t, e.do(alice, "POST", "/v1/sessions/"+sid+"/code", map[string]any{"code": "print(answer)"}), 409, "paused")
		requireProblem(t, e.do(alice, "GET", "/v1/sessions/"+sid+"/ports/8000/index.html", nil), 409, "paused")
		requireProblem(t, e.do(alice, "GET", "/v1/sessions/"+sid+"/files", nil), 409, "paused")
		requireProblem(t, e.do(alice, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "sleep 1", "background": true}), 409, "paused")
		requireProblem(t, e.do(alice, "GET", "/v1/sessions/"+sid+"/contexts", nil), 409, "paused")

		r = e.do(alice, "POST", "/v1/sessions/"+sid+"/resume", nil)
		require.Equal(t, 200, r.Status, "body: %s", r.Body)
		assert.Equal(t, "running", r.JSON(t)["state"])
		assert.Equal(t, "42\n", code(sid, "print(answer)")["stdout"], "the context's variable survived")
		assert.Equal(t, "running", e.do(alice, "GET", "/v1/tasks/"+server, nil).JSON(t)["status"], "the background process survived")
		assert.Equal(t, 200, e.do(alice, "GET", "/v1/sessions/"+sid+"/ports/8000/index.html", nil).Status, "and still serves")
	})

	t.Run("snapshot and fork", func(t *testing.T) {
		e.run(alice, sid, "mkdir -p data && echo v1 > data/state.txt")
		r := e.do(alice, "POST", "/v1/sessions/"+sid+"/snapshots", map[string]any{"name": "docker"})
		require.Equal(t, 201, r.Status, "body: %s", r.Body)
		snap := r.JSON(t)["id"].(string)
		e.run(alice, sid, "echo v2 > data/state.txt")
		r = e.do(alice, "POST", "/v1/sessions", map[string]any{"from_snapshot": snap})
		require.Equal(t, 201, r.Status, "body: %s", r.Body)
		fork := r.JSON(t)["id"].(string)
		sessions = append(sessions, fork)
		assert.Equal(t, "v1\n", e.run(alice, fork, "cat data/state.txt")["stdout"])
		assert.Equal(t, "<h1>hello preview</h1>\n", e.run(alice, fork, "cat index.html")["stdout"])
		assert.Equal(t, "0\n", e.run(alice, fork, "ps -eo args= | grep -c '^python3 server' || true")["stdout"], "processes are not in a snapshot")
		assert.Equal(t, "1\n", e.run(alice, sid, "ps -eo args= | grep -c '^python3 server' || true")["stdout"], "the source's server runs on")
		e.run(alice, fork, "echo mine > data/state.txt") // the sandbox user owns the restored files
		assert.Equal(t, "v2\n", e.run(alice, sid, "cat data/state.txt")["stdout"])
	})

	snapshotBytes := func() float64 {
		t.Helper()
		return e.do(alice, "GET", "/v1/me", nil).JSON(t)["quotas"].(map[string]any)["snapshot_bytes"].(map[string]any)["used"].(float64)
	}

	t.Run("a sparse file costs its data", func(t *testing.T) {
		s := newSession("docker")
		e.run(alice, s, "truncate -s 3G disk.img")
		before := snapshotBytes()
		r := e.do(alice, "POST", "/v1/sessions/"+s+"/snapshots", nil)
		require.Equal(t, 201, r.Status, "body: %s", r.Body)
		size := r.JSON(t)["size_bytes"].(float64)
		assert.Less(t, size, float64(1<<20), "3 GiB of holes take next to nothing")
		assert.Equal(t, before+size, snapshotBytes(), "/v1/me counts it")
		r = e.do(alice, "POST", "/v1/sessions", map[string]any{"from_snapshot": r.JSON(t)["id"]})
		require.Equal(t, 201, r.Status, "body: %s", r.Body)
		fork := r.JSON(t)["id"].(string)
		sessions = append(sessions, fork)
		out := strings.Fields(e.run(alice, fork, "stat -c '%s %b' disk.img")["stdout"].(string))
		require.Len(t, out, 2)
		assert.Equal(t, "3221225472", out[0])
		blocks, err := strconv.Atoi(out[1])
		require.NoError(t, err)
		assert.Less(t, blocks, 2048, "restored sparse")
	})

	t.Run("idle pause", func(t *testing.T) {
		require.Equal(t, 200, e.do(alice, "DELETE", "/v1/sessions/"+sid+"/processes/"+server, nil).Status)
		e.waitTask(alice, server)
		clock.Advance(61 * time.Second)
		e.svc.SweepNow(t.Context())
		require.Equal(t, "paused", e.do(alice, "GET", "/v1/sessions/"+sid, nil).JSON(t)["state"], "idle_action pause froze it")
		out := code(sid, "print(answer)")
		assert.Equal(t, "42\n", out["stdout"], "resumed on use, the variable kept")
		assert.Contains(t, out["notice"], "was paused, not wiped")
		assert.Contains(t, out["notice"], "files, running processes and code-context variables were kept")
		assert.Equal(t, "running", e.do(alice, "GET", "/v1/sessions/"+sid, nil).JSON(t)["state"])
	})

	t.Run("idle snapshot", func(t *testing.T) {
		park := newSession("docker-park")
		code(park, "gone = 1")
		e.run(alice, park, "echo kept > notes.txt")
		before := snapshotBytes()
		clock.Advance(61 * time.Second)
		e.svc.SweepNow(t.Context())
		sess := e.do(alice, "GET", "/v1/sessions/"+park, nil).JSON(t)
		require.Equal(t, "parked", sess["state"], "%v", sess)
		assert.Greater(t, snapshotBytes(), before, "the parking capture counts in snapshot_bytes")
		out := e.run(alice, park, "cat notes.txt")
		assert.Equal(t, "kept\n", out["stdout"])
		assert.Contains(t, out["notice"], "workspace files were kept")
		out = code(park, "print('gone' in globals())")
		assert.Equal(t, "False\n", out["stdout"], "variables are not kept by a snapshot")
	})
}

// inspectContainer inspects container id from the outside.
func inspectContainer(t *testing.T, id string) (container.InspectResponse, error) {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	defer cli.Close()
	return cli.ContainerInspect(t.Context(), id)
}
