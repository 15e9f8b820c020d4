package main

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	dockerclient "github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// TestDevSaysWhenTheEngineIsShared: `gateway dev` names its installation in its banner, keeps
// it across restarts (it is in the database), and says — banner and log — when its Docker
// engine holds another installation's objects, which it leaves alone.
func TestDevSaysWhenTheEngineIsShared(t *testing.T) {
	requirePostgres(t)
	requireDocker(t)
	t.Parallel()
	other := providers.NewInstallationID()
	id := otherInstallationsContainer(t, other)

	dir := dataDir(t)
	addr := freeAddr(t)
	g := startDev(t, dir, addr)
	assert.Contains(t, g.banner, "installation: "+g.installation+" (")
	assert.Contains(t, g.banner, "shared engine: ")
	assert.Contains(t, g.banner, other+": 1 container", "the other installation and what it has:\n%s", g.banner)
	log, err := os.ReadFile(filepath.Join(dir, "gateway.log"))
	require.NoError(t, err)
	assert.Contains(t, string(log), "other Sandgate installations' objects")
	assert.Contains(t, string(log), other)

	g.kill(syscall.SIGTERM)
	again := startDev(t, dir, addr)
	assert.Equal(t, g.installation, again.installation, "the installation is the database's, kept across restarts")
	c := &client{t: t, base: again.base, token: again.token}
	c.json("POST", "/v1/sessions/default/commands?profile=docker", `{"command":"true"}`, 200)
	cli := dockerClient(t)
	_, err = cli.ContainerInspect(t.Context(), id)
	assert.NoError(t, err, "the other installation's container is left alone")
}

// otherInstallationsContainer starts a container labelled as another installation's sandbox
// of profile docker would be, removed when the test ends.
func otherInstallationsContainer(t *testing.T, installation string) string {
	t.Helper()
	cli := dockerClient(t)
	labels := map[string]string{docker.LabelManagedBy: docker.ManagedBy, docker.LabelInstallation: installation, docker.LabelProfile: "docker"}
	resp, err := cli.ContainerCreate(t.Context(), &container.Config{Image: "sandgate/sandbox-python:latest", Entrypoint: []string{"sleep", "infinity"}, Labels: labels},
		&container.HostConfig{Init: new(true)}, nil, nil, "")
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = cli.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true})
	})
	require.NoError(t, cli.ContainerStart(t.Context(), resp.ID, container.StartOptions{}))
	return resp.ID
}

// dockerClient is a client of the environment's engine, closed when the test ends.
func dockerClient(t *testing.T) *dockerclient.Client {
	t.Helper()
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}
