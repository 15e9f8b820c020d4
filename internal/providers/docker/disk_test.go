package docker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/loopdisk"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// diskPol bounds the workspace to 24 MiB.
var diskPol = func() providers.Policy { p := allowPol; p.DiskMB = 24; return p }()

// newDiskProvider is a provider whose workspace disks live in a folder of the test's; it
// skips (fails under CI=true) where this process cannot make loop disks. Whatever disks the
// test leaves are detached and removed when it ends.
func newDiskProvider(t *testing.T, mutate ...func(*docker.Options)) (*docker.Provider, string) {
	t.Helper()
	requireEngine(t)
	if err := loopdisk.Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %v", err)
		}
		t.Skip(err)
	}
	state := t.TempDir()
	disks := filepath.Join(state, "disks", testInstallation)
	t.Cleanup(func() { // after the containers are gone (newProvider's clean-up runs first)
		images, _ := filepath.Glob(filepath.Join(disks, "*.img"))
		for _, img := range images {
			_ = loopdisk.Remove(img, strings.TrimSuffix(img, ".img")+".dev")
		}
	})
	p := newProvider(t, append([]func(*docker.Options){func(o *docker.Options) {
		o.Config.StateDir = state
		o.Policy = diskPol
	}}, mutate...)...)
	require.True(t, p.Capabilities().PolicyDisk, "a root gateway next to a local engine bounds workspaces: %v", docker.DiskError(p))
	return p, disks
}

// diskOf returns the disk a sandbox's container names, and requires its image and a loop
// device serving it.
func diskOf(t *testing.T, disks, id string) (image, link string) {
	t.Helper()
	ins, err := inspect(t, id)
	require.NoError(t, err)
	name := ins.Config.Labels[docker.LabelDisk]
	require.NotEmpty(t, name, "the container names its workspace disk")
	image, link = filepath.Join(disks, name+".img"), filepath.Join(disks, name+".dev")
	devs, err := loopdisk.Devices(image)
	require.NoError(t, err)
	require.Len(t, devs, 1, "one loop device serves the disk")
	return image, link
}

// requireDiskGone requires that the disk's files and loop device are gone.
func requireDiskGone(t *testing.T, image, link string) {
	t.Helper()
	for _, p := range []string{image, link} {
		_, err := os.Lstat(p)
		assert.True(t, errors.Is(err, os.ErrNotExist), "%s is removed", p)
	}
	devs, err := loopdisk.Devices(image)
	require.NoError(t, err)
	assert.Empty(t, devs, "its loop device is detached")
}

// A workspace bounded by disk_mb: writes past it fail inside the sandbox with ENOSPC (a
// result, not an error), the disk survives a container restart and even losing its loop
// device (a reboot), and destroying the sandbox removes it.
func TestDiskBoundedWorkspace(t *testing.T) {
	t.Parallel()
	p, disks := newDiskProvider(t)
	sb, err := p.Create(t.Context(), agent, diskPol)
	require.NoError(t, err)
	id := sb.ID()
	image, link := diskOf(t, disks, id)

	mb, err := strconv.Atoi(strings.TrimSpace(sh(t, sb, "df -m --output=size /workspace | tail -1")))
	require.NoError(t, err)
	assert.True(t, mb > 16 && mb <= 24, "the workspace is a file system of at most disk_mb (%d MiB)", mb)
	sh(t, sb, "echo kept > /workspace/state.txt") // the sandbox user writes its workspace

	r := run(t, sb, providers.ExecSpec{Command: "dd if=/dev/zero of=/workspace/fill bs=1M count=64"})
	require.NoError(t, r.err, "a full disk is the program's failure, not the gateway's")
	assert.NotEqual(t, 0, r.st.ExitCode)
	assert.Contains(t, r.stderr, "No space left on device")
	assert.Equal(t, "kept\n", sh(t, sb, "cat /workspace/state.txt"), "the sandbox goes on")
	sh(t, sb, "rm /workspace/fill")
	require.NoError(t, sb.Close())

	// A stopped container, started again by its next use, keeps its workspace; so does one
	// whose loop device went away (after a reboot): Attach attaches the disk again before it
	// starts the container.
	cli := engineClient(t)
	defer cli.Close()
	zero := 0
	require.NoError(t, cli.ContainerStop(t.Context(), id, container.StopOptions{Timeout: &zero}))
	again, err := p.Attach(t.Context(), id, agent, diskPol)
	require.NoError(t, err)
	assert.Equal(t, "kept\n", sh(t, again, "cat /workspace/state.txt"))
	require.NoError(t, again.Close())

	require.NoError(t, cli.ContainerStop(t.Context(), id, container.StopOptions{Timeout: &zero}))
	devs, err := loopdisk.Devices(image)
	require.NoError(t, err)
	for _, d := range devs {
		require.NoError(t, loopdisk.Detach(d))
	}
	again, err = p.Attach(t.Context(), id, agent, diskPol)
	require.NoError(t, err)
	assert.Equal(t, "kept\n", sh(t, again, "cat /workspace/state.txt"))
	r = run(t, again, providers.ExecSpec{Command: "dd if=/dev/zero of=/workspace/fill bs=1M count=64"})
	require.NoError(t, r.err)
	assert.Contains(t, r.stderr, "No space left on device", "still bounded after re-attaching")
	require.NoError(t, again.Close())

	require.NoError(t, p.Destroy(t.Context(), id))
	requireDiskGone(t, image, link)
}

// A disk whose container was removed behind the gateway's back (or never made: a gateway
// that died in between) is removed by the orphan sweep once old enough; a disk in use is not.
func TestSweepOrphanedDisks(t *testing.T) {
	t.Parallel()
	p, disks := newDiskProvider(t)
	kept := create(t, p, diskPol)
	lost, err := p.Create(t.Context(), agent, diskPol)
	require.NoError(t, err)
	_ = lost.Close()
	keptImage, _ := diskOf(t, disks, kept.ID())
	lostImage, lostLink := diskOf(t, disks, lost.ID())
	cli := engineClient(t)
	defer cli.Close()
	require.NoError(t, cli.ContainerRemove(t.Context(), lost.ID(), container.RemoveOptions{Force: true, RemoveVolumes: true}))
	neverUsed := filepath.Join(disks, "0123456789abcdef0123.img")
	neverLink := strings.TrimSuffix(neverUsed, ".img") + ".dev"
	_, err = loopdisk.Create(t.Context(), neverUsed, neverLink, 8, loopdisk.Owner{})
	require.NoError(t, err)

	keep := func(string) bool { return true }
	_, err = p.SweepOrphans(t.Context(), keep)
	require.NoError(t, err)
	_, err = os.Stat(lostImage)
	require.NoError(t, err, "young disks are left alone")

	p.OrphanMinAge = time.Nanosecond
	_, err = p.SweepOrphans(t.Context(), keep)
	require.NoError(t, err)
	requireDiskGone(t, lostImage, lostLink)
	requireDiskGone(t, neverUsed, neverLink)
	_, err = os.Stat(keptImage)
	require.NoError(t, err, "a disk a container names stays")
	assert.Equal(t, "ok\n", sh(t, kept, "echo ok > /workspace/f && cat /workspace/f"))

	// An orphaned sandbox is swept with its disk.
	_, err = p.SweepOrphans(t.Context(), func(string) bool { return false })
	require.NoError(t, err)
	requireDiskGone(t, keptImage, strings.TrimSuffix(keptImage, ".img")+".dev")
}

// A read-only root (fs_allow_*) gets the disk at /workspace instead of its plain volume; an
// engine that refuses storage-opt (this one: overlay2 on ext4) is met with a loop disk, and so
// is a warm pool's container.
func TestDiskVariants(t *testing.T) {
	t.Parallel()
	ro := diskPol
	ro.FSAllowWrite = []string{"/workspace"}
	p, disks := newDiskProvider(t, func(o *docker.Options) {
		o.Policy = ro
		o.Config.WarmPoolSize = 1
		o.PoolRefillInterval = time.Second
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = p.Close()
		assert.NoError(t, p.DrainPool(ctx))
	})
	sb := create(t, p, ro)
	diskOf(t, disks, sb.ID())
	r := run(t, sb, providers.ExecSpec{Command: "dd if=/dev/zero of=/workspace/fill bs=1M count=64"})
	require.NoError(t, r.err)
	assert.Contains(t, r.stderr, "No space left on device")
	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	assert.True(t, ins.HostConfig.ReadonlyRootfs)
	mounts := 0
	for _, m := range ins.Mounts {
		if m.Destination == docker.Workspace {
			mounts++
		}
	}
	assert.Equal(t, 1, mounts, "one mount at the workspace: the disk")

	q, qdisks := newDiskProvider(t)
	docker.AssumeStorageOpt(q)
	sq := create(t, q, diskPol)
	diskOf(t, qdisks, sq.ID())
	ins, err = inspect(t, sq.ID())
	require.NoError(t, err)
	assert.Empty(t, ins.HostConfig.StorageOpt, "the engine refused storage-opt: a loop disk instead")
	r = run(t, sq, providers.ExecSpec{Command: "dd if=/dev/zero of=/workspace/fill bs=1M count=64"})
	require.NoError(t, r.err)
	assert.Contains(t, r.stderr, "No space left on device")
}

// Where loop disks cannot be made the capability is false, and the provider refuses a
// policy with disk_mb rather than run unbounded.
func TestDiskCapability(t *testing.T) {
	t.Parallel()
	for name, mutate := range map[string]func(*docker.Options){
		"remote engine": func(o *docker.Options) { o.Config.Host = "tcp://127.0.0.1:1" },
		"named user":    func(o *docker.Options) { o.Config.User = "nobody" },
		"attached":      func(o *docker.Options) { o.AttachTo = "some-container" },
	} {
		opts := docker.Options{Profile: "capability", Installation: testInstallation, Config: docker.Config{Image: testImage}, Policy: diskPol, Logger: quietLogs}
		mutate(&opts)
		p, err := docker.New(opts)
		require.NoError(t, err)
		assert.False(t, p.Capabilities().PolicyDisk, name)
		assert.Error(t, docker.DiskError(p), name)
		_ = p.Close()
	}
	if loopdisk.Available() == nil {
		return
	}
	requireEngine(t)
	p, err := docker.New(docker.Options{Profile: "capability", Installation: testInstallation, Config: docker.Config{Image: testImage}, Policy: diskPol, Logger: quietLogs})
	require.NoError(t, err)
	defer p.Close()
	require.False(t, p.Capabilities().PolicyDisk)
	_, err = p.Create(t.Context(), agent, diskPol)
	assert.True(t, fault.IsKind(err, fault.Policy), "%v", err)
}
