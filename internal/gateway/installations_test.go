package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// dockerTestImage is the sandbox image scripts/docker-setup.sh builds.
var dockerTestImage = func() string {
	if img := os.Getenv("SANDGATE_DOCKER_TEST_IMAGE"); img != "" {
		return img
	}
	return "sandgate/sandbox-python:latest"
}()

// requireDockerImage skips the test without a Docker engine and the sandbox image (under
// CI=true it fails instead).
func requireDockerImage(t *testing.T) {
	t.Helper()
	reason := ""
	if !docker.Available(t.Context(), "") {
		reason = "no Docker engine is reachable (run scripts/docker-setup.sh)"
	} else if cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation()); err != nil {
		reason = "no Docker client: " + err.Error()
	} else {
		defer cli.Close()
		if _, err := cli.ImageInspect(t.Context(), dockerTestImage); err != nil {
			reason = "the sandbox image " + dockerTestImage + " is missing (run scripts/docker-setup.sh): " + err.Error()
		}
	}
	if reason == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and %s", reason)
	}
	t.Skip(reason)
}

// sweepWatch is the docker provider of one gateway, as the gateway built it, with a record of
// every orphan sweep the gateway's sweeper ran through it.
type sweepWatch struct {
	mu       sync.Mutex
	provider *docker.Provider
	starts   []time.Time // of each sweep
	removed  []string    // every container id a sweep removed
	errs     []error
}

// watchedDocker is the real docker provider with its sweeps recorded; every other method
// (and optional interface: pools, parking, ports) is the provider's own.
type watchedDocker struct {
	*docker.Provider
	w *sweepWatch
}

func (d watchedDocker) SweepOrphans(ctx context.Context, keep func(id string) bool) ([]string, error) {
	start := time.Now()
	removed, err := d.Provider.SweepOrphans(ctx, keep)
	d.w.mu.Lock()
	d.w.starts = append(d.w.starts, start)
	d.w.removed = append(d.w.removed, removed...)
	if err != nil {
		d.w.errs = append(d.w.errs, err)
	}
	d.w.mu.Unlock()
	return removed, err
}

// sweepsSince counts the sweeps that started after t.
func (w *sweepWatch) sweepsSince(t time.Time) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.starts {
		if s.After(t) {
			n++
		}
	}
	return n
}

func (w *sweepWatch) removedIDs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.removed)
}

// watchedRegistry serves local_subprocess and docker, the docker provider watched by w and
// made with orphanMinAge.
func watchedRegistry(w *sweepWatch, orphanMinAge time.Duration) *providers.Registry {
	reg := providers.NewRegistry()
	reg.Add(local.Backend())
	b := docker.Backend()
	b.Factory = func(ctx providers.BuildContext) (providers.Provider, error) {
		p, err := docker.Factory(ctx)
		if err != nil {
			return nil, err
		}
		dp := p.(*docker.Provider)
		dp.OrphanMinAge = orphanMinAge
		w.mu.Lock()
		w.provider = dp
		w.mu.Unlock()
		return watchedDocker{Provider: dp, w: w}, nil
	}
	reg.Add(b)
	return reg
}

// TestTwoInstallationsShareAnEngine: two gateways with separate databases (two installations)
// and the same profile names on one Docker engine, each with a warm pool of its own
// configuration, sweeping every second with a short orphan age. Neither loses a sandbox —
// after many sweeps in which the other's sandboxes were old enough to be removed, every
// session still runs code with its variables and files — while each installation's real
// orphan (a sandbox no session records, as a gateway that died between making and recording
// it leaves) is removed by its own installation, and a container made before installation ids
// by neither.
func TestTwoInstallationsShareAnEngine(t *testing.T) {
	requireDockerImage(t)
	t.Parallel()
	// Longer than any sandbox's creation takes, even on a busy machine: a gateway's own sweep
	// must not take its sandbox before its session records it.
	const orphanMinAge = 30 * time.Second
	const sweepsAfter = 10 // sweeps of each gateway once everything is old enough to remove

	type installation struct {
		name     string
		env      *gatewaytest.Env
		watch    *sweepWatch
		tok      string
		sessions []string
		orphan   string
	}
	start := func(name string, pids int64) *installation {
		in := &installation{name: name, watch: &sweepWatch{}}
		in.env = gatewaytest.Start(t, gatewaytest.Options{Registry: watchedRegistry(in.watch, orphanMinAge), Config: func(c *config.Config) {
			c.Sandbox.Broker.SweepInterval = 1
			c.Sandbox.DefaultProfile = "docker"
			c.Sandbox.Profiles = map[string]config.Profile{
				"docker": {Type: docker.TypeName, Stateful: true, Blocks: config.Blocks{docker.TypeName: &docker.Block{
					Image: dockerTestImage, Pull: docker.PullNever, PidsLimit: pids,
					WarmPool: &docker.WarmPoolBlock{Size: 1},
				}}},
			}
		}})
		in.tok = in.env.Token("alice")
		return in
	}
	// Different configurations: without installation ids, each pool's refill would remove the
	// other's ready containers as stale.
	a, b := start("a", 256), start("b", 200)
	require.NotEqual(t, a.env.Gateway.Installation(), b.env.Gateway.Installation())

	call := func(in *installation, method, path, body string) map[string]any {
		t.Helper()
		st, _, out := in.env.Do(method, path, in.tok, strings.NewReader(body), map[string]string{"Content-Type": "application/json"})
		require.Contains(t, []int{http.StatusOK, http.StatusCreated}, st, "%s %s on %s: %s", method, path, in.name, out)
		var m map[string]any
		require.NoError(t, json.Unmarshal(out, &m), "%s", out)
		return m
	}
	for _, in := range []*installation{a, b} {
		for i := range 2 {
			sid := call(in, "POST", "/v1/sessions", `{"profile":"docker"}`)["id"].(string)
			in.sessions = append(in.sessions, sid)
			mark := fmt.Sprintf("%s-%d", in.name, i)
			call(in, "POST", "/v1/sessions/"+sid+"/code", `{"code":"mark = '`+mark+`'\nopen('mark.txt', 'w').write(mark)"}`)
		}
		sb, err := in.watch.provider.Create(t.Context(), providers.Principal{Mode: providers.ModeAgent, Subject: "alice"},
			providers.Policy{NetworkEgress: providers.EgressAllow, Timeout: time.Minute, Strict: true})
		require.NoError(t, err, "an orphan of %s", in.name)
		in.orphan = sb.ID()
		_ = sb.Close()
	}
	legacy := legacyContainer(t)
	oldEnough := time.Now().Add(orphanMinAge)

	// Wait for the orphans to go and for many sweeps in which every container of the other
	// installation was old enough to be removed, had the sweeps looked at it.
	// A sweep that removes anything but its own orphan ends the wait at once (the assertions
	// below say what).
	done := func(in *installation) bool {
		return slices.Contains(in.watch.removedIDs(), in.orphan) && in.watch.sweepsSince(oldEnough) >= sweepsAfter
	}
	strayed := func(in *installation) bool {
		return slices.ContainsFunc(in.watch.removedIDs(), func(id string) bool { return id != in.orphan })
	}
	deadline := time.Now().Add(5*time.Minute + orphanMinAge)
	for !(done(a) && done(b)) && !strayed(a) && !strayed(b) {
		require.True(t, time.Now().Before(deadline), "orphans removed: a %v, b %v; sweeps since everything was old enough: a %d, b %d",
			slices.Contains(a.watch.removedIDs(), a.orphan), slices.Contains(b.watch.removedIDs(), b.orphan),
			a.watch.sweepsSince(oldEnough), b.watch.sweepsSince(oldEnough))
		time.Sleep(200 * time.Millisecond)
	}

	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	defer cli.Close()
	for _, in := range []*installation{a, b} {
		assert.Equal(t, []string{in.orphan}, in.watch.removedIDs(), "%s's sweeps removed its orphan and nothing else", in.name)
		in.watch.mu.Lock()
		assert.Empty(t, in.watch.errs, "%s's sweeps", in.name)
		in.watch.mu.Unlock()
		for i, sid := range in.sessions {
			mark := fmt.Sprintf("%s-%d", in.name, i)
			res := call(in, "POST", "/v1/sessions/"+sid+"/code", `{"code":"print(mark, open('mark.txt').read())"}`)
			assert.Equal(t, mark+" "+mark+"\n", res["stdout"], "%s: session %s keeps its variables and files", in.name, sid)
			assert.Empty(t, res["notice"], "%s: session %s was not recreated", in.name, sid)
			box := call(in, "GET", "/v1/sessions/"+sid, "")["sandbox_id"]
			if id, ok := box.(string); ok && id != "" {
				ins, err := cli.ContainerInspect(t.Context(), id)
				require.NoError(t, err)
				assert.Equal(t, in.env.Gateway.Installation(), ins.Config.Labels[docker.LabelInstallation], "%s's sandbox is labelled with its installation", in.name)
			}
		}
	}
	_, err = cli.ContainerInspect(t.Context(), legacy)
	assert.NoError(t, err, "a container without an installation id is never swept")
}

// legacyContainer starts a container labelled as a Sandgate before installation ids labelled
// the sandboxes of profile docker (managed-by and profile, no installation), removed when the
// test ends.
func legacyContainer(t *testing.T) string {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	require.NoError(t, err)
	defer cli.Close()
	labels := map[string]string{docker.LabelManagedBy: docker.ManagedBy, docker.LabelProfile: "docker"}
	resp, err := cli.ContainerCreate(t.Context(), &container.Config{Image: dockerTestImage, Entrypoint: []string{"sleep", "infinity"}, Labels: labels},
		&container.HostConfig{Init: new(true)}, nil, nil, "")
	require.NoError(t, err)
	t.Cleanup(func() {
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return
		}
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = cli.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true})
	})
	require.NoError(t, cli.ContainerStart(t.Context(), resp.ID, container.StartOptions{}))
	return resp.ID
}
