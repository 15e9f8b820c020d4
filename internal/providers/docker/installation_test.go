package docker_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/testutil/dockertest"
)

// syncBuffer is a log sink safe for the provider's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestInstallationsShareAnEngine: two installations (two databases) with a profile of the same
// name on one engine, each with a warm pool of its own configuration. Each sweep removes its
// own installation's orphan and nothing of the other's — sandboxes, orphans, ready pool
// containers — nor a container made before installation ids, which it reports once. Claims,
// drains, attaches, destroys and snapshots keep to their installation; a census sees both.
func TestInstallationsShareAnEngine(t *testing.T) {
	t.Parallel()
	profile := testProfile(t)
	instA, instB := providers.NewInstallationID(), providers.NewInstallationID()
	sockDir, err := os.MkdirTemp("", "sgi")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	logs := &syncBuffer{}
	a := newProvider(t, func(o *docker.Options) {
		o.Profile, o.Installation, o.Config.WarmPoolSize = profile, instA, 1
		o.Config.Sandboxd.SocketDir = sockDir
		o.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	b := newProvider(t, func(o *docker.Options) {
		o.Profile, o.Installation, o.Config.WarmPoolSize = profile, instB, 1
		o.Config.Sandboxd.SocketDir = sockDir
		o.Config.PidsLimit = 200 // another configuration: A's refill would remove B's pool as stale
	})
	for _, inst := range []string{instA, instB} {
		dockertest.Register(inst)
	}
	waitQueued(t, a, 1)
	waitQueued(t, b, 1)
	ctx := t.Context()
	cli := engineClient(t)
	defer cli.Close()

	sbA, sbB := create(t, a, allowPol), create(t, b, allowPol)
	for sb, want := range map[providers.Sandbox]string{sbA: instA, sbB: instB} {
		ins, err := inspect(t, sb.ID())
		require.NoError(t, err)
		assert.Equal(t, want, ins.Config.Labels[docker.LabelInstallation], "the container names its installation")
		assert.Equal(t, profile, ins.Config.Labels[docker.LabelProfile])
		for _, m := range ins.Mounts {
			if m.Type != "volume" {
				continue
			}
			v, err := cli.VolumeInspect(ctx, m.Name)
			require.NoError(t, err)
			assert.Equal(t, want, v.Labels[docker.LabelInstallation], "volume %s at %s names its installation", m.Name, m.Destination)
		}
		folder := filepath.Join(sockDir, want, profileFolderOf(profile), ins.Config.Labels[docker.LabelSandboxd])
		_, err = os.Stat(filepath.Join(folder, "sd.sock"))
		assert.NoError(t, err, "the socket folder is in its installation's folder")
	}
	insB, err := inspect(t, sbB.ID())
	require.NoError(t, err)
	assert.EqualValues(t, 200, *insB.HostConfig.PidsLimit, "B's sandbox came from B's pool (or B's configuration)")
	sh(t, sbA, "echo a > mine.txt")
	sh(t, sbB, "echo b > mine.txt")

	orphanA, err := a.Create(ctx, agent, allowPol) // a gateway died before recording it
	require.NoError(t, err)
	orphanB, err := b.Create(ctx, agent, allowPol)
	require.NoError(t, err)
	legacy := legacyContainer(t, profile)

	// Every container is old enough for the sweeps: only installation ids protect the others'.
	a.OrphanMinAge, b.OrphanMinAge = time.Nanosecond, time.Nanosecond
	keepA := func(id string) bool { return id == sbA.ID() }
	keepB := func(id string) bool { return id == sbB.ID() }
	var removedA, removedB []string
	for range 3 { // a container claimed from a pool is removed at the second sweep that finds it
		r, err := a.SweepOrphans(ctx, keepA)
		require.NoError(t, err)
		removedA = append(removedA, r...)
		r, err = b.SweepOrphans(ctx, keepB)
		require.NoError(t, err)
		removedB = append(removedB, r...)
	}
	assert.Equal(t, []string{orphanA.ID()}, removedA, "A removes its orphan, nothing of B's")
	assert.Equal(t, []string{orphanB.ID()}, removedB, "B removes its orphan, nothing of A's")
	assert.Equal(t, "a\n", sh(t, sbA, "cat mine.txt"))
	assert.Equal(t, "b\n", sh(t, sbB, "cat mine.txt"))
	_, err = inspect(t, legacy)
	assert.NoError(t, err, "a container without an installation id is never swept")
	assert.Equal(t, 1, strings.Count(logs.String(), "without an installation id"), "reported once:\n%s", logs)
	assert.Contains(t, logs.String(), "count=1")
	waitPoolReady(t, a, 1)
	waitPoolReady(t, b, 1)

	// Attach, destroy, pause and snapshots: the other installation's sandboxes are not there.
	_, err = a.Attach(ctx, sbB.ID(), agent, allowPol)
	assert.True(t, fault.IsKind(err, fault.Gone), "attach: %v", err)
	assert.True(t, fault.IsKind(a.Pause(ctx, sbB.ID()), fault.Gone))
	require.NoError(t, a.Destroy(ctx, sbB.ID()))
	assert.Equal(t, "b\n", sh(t, sbB, "cat mine.txt"), "A's destroy left B's sandbox alone")
	snapID := fmt.Sprintf("%032x", time.Now().UnixNano())
	snap, err := a.Snapshot(ctx, sbA.ID(), providers.SnapshotMeta{ID: snapID, Owner: "docker-test", SessionID: "s1", Profile: profile})
	require.NoError(t, err)
	ii, err := cli.ImageInspect(ctx, snap.Ref)
	require.NoError(t, err)
	assert.Equal(t, instA, ii.Config.Labels[docker.LabelInstallation], "the snapshot image names its installation")
	_, err = b.Restore(ctx, snap.Ref, agent, allowPol)
	assert.True(t, fault.IsKind(err, fault.NotFound), "restore of another installation's snapshot: %v", err)
	require.NoError(t, b.DeleteSnapshot(ctx, snap.Ref))
	_, err = cli.ImageInspect(ctx, snap.Ref)
	require.NoError(t, err, "B's delete left A's snapshot alone")

	census, err := a.Census(ctx)
	require.NoError(t, err)
	assert.Equal(t, instA, census.Installation)
	assert.GreaterOrEqual(t, census.Installations[instA].Containers, 2, "A's sandbox and pool container")
	assert.Equal(t, 1, census.Installations[instA].Images, "A's snapshot")
	assert.Positive(t, census.Installations[instA].Volumes)
	assert.GreaterOrEqual(t, census.Installations[instB].Containers, 2, "B's sandbox and pool container")
	assert.GreaterOrEqual(t, census.Installations[""].Containers, 1, "the container made before installation ids")
	others, unlabelled := census.Others()
	assert.Contains(t, others, instB)
	assert.NotContains(t, others, instA)
	assert.True(t, unlabelled)
	require.NoError(t, a.DeleteSnapshot(ctx, snap.Ref))

	// A's drain takes A's pool only.
	require.NoError(t, a.Close())
	require.NoError(t, a.DrainPool(ctx))
	ready, err := a.PoolReady(ctx)
	require.NoError(t, err)
	assert.Empty(t, ready)
	waitPoolReady(t, b, 1)

	// A container made before installation ids is still the destroy's of any installation (a
	// session of each might use one).
	require.NoError(t, a.Destroy(ctx, legacy))
	_, err = inspect(t, legacy)
	assert.True(t, cerrdefs.IsNotFound(err), "destroyed: %v", err)
}

// waitPoolReady waits until p's warm pool has n ready containers of its configuration.
func waitPoolReady(t *testing.T, p *docker.Provider, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ready, err := p.PoolReady(t.Context())
		require.NoError(t, err)
		if len(ready) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the warm pool has %d ready containers, not %d", len(ready), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// legacyContainer starts a container labelled as a Sandgate before installation ids labelled
// its sandboxes (managed-by and profile, no installation), removed when the test ends.
func legacyContainer(t *testing.T, profile string) string {
	t.Helper()
	cli := engineClient(t)
	defer cli.Close()
	labels := map[string]string{docker.LabelManagedBy: docker.ManagedBy, docker.LabelProfile: profile}
	resp, err := cli.ContainerCreate(t.Context(), &container.Config{Image: testImage, Entrypoint: []string{"sleep", "infinity"}, Labels: labels},
		&container.HostConfig{Init: new(true)}, nil, nil, "sandgate-t-legacy-"+randomSuffix())
	require.NoError(t, err)
	t.Cleanup(func() {
		cli := engineClient(t)
		defer cli.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = cli.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true})
	})
	require.NoError(t, cli.ContainerStart(t.Context(), resp.ID, container.StartOptions{}))
	return resp.ID
}

// profileFolderOf is the socket folder of a profile (the provider's profileFolder of its slug,
// for the test profiles' names, which need no slugging).
func profileFolderOf(profile string) string {
	if len(profile) > 24 {
		return profile[:24]
	}
	return profile
}
