package api_test

import (
	"testing"

	"github.com/docker/docker/client"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// TestSessionResourcesOnDocker: a session's memory_mb and cpu become its container's cgroup
// limits on the real engine, lower than the profile's; above the profile's they are refused.
func TestSessionResourcesOnDocker(t *testing.T) {
	t.Parallel()
	img := dockerImage(t)
	e := newEnv(t, envOpts{config: func(c *config.Config) {
		c.Sandbox.Profiles["docker"] = config.Profile{
			Type: docker.TypeName, Policy: config.Policy{CPU: ptr(1.0), MemoryMB: ptr(512)},
			Blocks: config.Blocks{docker.TypeName: &docker.Block{Image: img, Pull: "never"}},
		}
	}})
	alice := e.token("alice")
	r := e.do(alice, "POST", "/v1/sessions", map[string]any{"profile": "docker", "cpu": 0.5, "memory_mb": 256})
	require.Equal(t, 201, r.Status, "body: %s", r.Body)
	s := r.JSON(t)
	require.EqualValues(t, 0.5, s["cpu"])
	require.EqualValues(t, 256, s["memory_mb"])
	sid := s["id"].(string)
	t.Cleanup(func() { e.do(alice, "DELETE", "/v1/sessions/"+sid, nil) })

	r = e.do(alice, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "true"})
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	box := e.do(alice, "GET", "/v1/sessions/"+sid, nil).JSON(t)["sandbox_id"].(string)
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	defer cli.Close()
	ins, err := cli.ContainerInspect(t.Context(), box)
	require.NoError(t, err)
	require.Equal(t, int64(256<<20), ins.HostConfig.Memory, "256 MiB, not the profile's 512")
	require.Equal(t, int64(5e8), ins.HostConfig.NanoCPUs, "half a core, not the profile's one")

	requireProblem(t, e.do(alice, "POST", "/v1/sessions", map[string]any{"profile": "docker", "memory_mb": 1024}), 403, "policy")
	requireProblem(t, e.do(alice, "POST", "/v1/sessions", map[string]any{"profile": "docker", "cpu": 2}), 403, "policy")
}
