package api_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// TestDestroyCancelsDockerProcesses: destroying a docker session ends its background
// processes as cancelled, with the reason — not as a provider failure of the execution
// stream the container's removal cut (semantics: Destroy). Repeated, as the stop and the
// removal race.
func TestDestroyCancelsDockerProcesses(t *testing.T) {
	t.Parallel()
	img := dockerImage(t)
	e := newEnv(t, envOpts{config: func(c *config.Config) {
		c.Sandbox.Profiles["docker"] = config.Profile{Type: docker.TypeName, Blocks: config.Blocks{docker.TypeName: &docker.Block{Image: img, Pull: "never"}}}
	}})
	tok := e.token("alice")
	for range 3 {
		sid := e.newSession(tok, "docker")
		r := e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "echo up; exec sleep 300", "background": true})
		require.Equal(t, 201, r.Status, "body: %s", r.Body)
		pid := r.JSON(t)["id"].(string)
		s := e.stream(tok, "GET", "/v1/tasks/"+pid+"/output", nil, nil)
		require.Equal(t, "stdout", s.event(t).event, "the process runs")
		_ = s.resp.Body.Close()

		require.Equal(t, 200, e.do(tok, "DELETE", "/v1/sessions/"+sid, nil).Status)
		final := e.waitTask(tok, pid)
		assert.Equal(t, "cancelled", final["status"], "task: %v", final)
		assert.Equal(t, "the session was destroyed", final["error"])
		assert.Equal(t, "cancelled", final["error_type"])
	}
}
