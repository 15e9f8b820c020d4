package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// newSnapshotID is a fresh snapshot id (32 hex digits).
func newSnapshotID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%x", b)
}

// snapshot captures sb and deletes the capture when the test ends.
func snapshot(t *testing.T, p *docker.Provider, sb providers.Sandbox) providers.SnapshotInfo {
	t.Helper()
	id := newSnapshotID()
	info, err := p.Snapshot(t.Context(), sb.ID(), providers.SnapshotMeta{ID: id, Owner: "docker-test", SessionID: "s1", Profile: "p"})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, p.DeleteSnapshot(ctx, info.Ref))
	})
	return info
}

// restore restores ref into a sandbox destroyed when the test ends.
func restore(t *testing.T, p *docker.Provider, ref string, pol providers.Policy) providers.Sandbox {
	t.Helper()
	sb, err := p.Restore(t.Context(), ref, agent, pol)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = sb.Close()
		assert.NoError(t, p.Destroy(ctx, sb.ID()))
	})
	return sb
}

// imageGrowth is how much more the engine holds for image ref than for base, in bytes.
func imageGrowth(t *testing.T, ref, base string) int64 {
	t.Helper()
	cli := engineClient(t)
	defer cli.Close()
	a, err := cli.ImageInspect(t.Context(), ref)
	require.NoError(t, err)
	b, err := cli.ImageInspect(t.Context(), base)
	require.NoError(t, err)
	return a.Size - b.Size
}

// TestSnapshotRestoresFilesIntoANewSandbox captures a workspace, changes it afterwards, and
// starts a new sandbox from the capture: it has the files as they were captured, writable by
// the sandbox's user; the original is untouched. The capture is an image holding the
// archive, labelled; deleting it does not touch the restored sandbox.
func TestSnapshotRestoresFilesIntoANewSandbox(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p, allowPol)
	ctx := t.Context()
	sh(t, sb, "mkdir -p src/pkg && echo 'print(\"from the snapshot\")' > src/pkg/main.py && printf 'v1' > state.txt && chmod 600 state.txt && ln -s src/pkg link")

	info := snapshot(t, p, sb)
	assert.True(t, strings.HasPrefix(info.Ref, docker.SnapshotRepository+":"), info.Ref)
	assert.Positive(t, info.SizeBytes)
	_, err := p.Snapshot(ctx, sb.ID(), providers.SnapshotMeta{ID: strings.TrimPrefix(info.Ref, docker.SnapshotRepository+":")})
	assert.True(t, fault.IsKind(err, fault.Conflict), "the same id twice: %v", err)
	sh(t, sb, "printf 'v2' > state.txt && echo later > later.txt")

	restored := restore(t, p, info.Ref, allowPol)
	assert.NotEqual(t, sb.ID(), restored.ID())
	assert.Equal(t, "from the snapshot\n", sh(t, restored, "python3 src/pkg/main.py"))
	assert.Equal(t, "v1", readAll(t, restored, "state.txt"))
	assert.Equal(t, "src/pkg\n", sh(t, restored, "readlink link"))
	assert.Equal(t, "600\n", sh(t, restored, "stat -c %a state.txt"))
	sh(t, restored, "printf 'v3' >> state.txt && echo new > new.txt") // writable by the sandbox's user
	_, err = restored.ReadFile(ctx, "later.txt")
	assert.True(t, fault.IsKind(err, fault.NotFound), "what was written after the snapshot is not in it: %v", err)
	assert.Equal(t, "v2", readAll(t, sb, "state.txt"), "the original is untouched")

	// The image: labelled, one layer with the archive on the sandbox's image, which a
	// snapshot of the restored sandbox shares too (captures never stack).
	cli := engineClient(t)
	defer cli.Close()
	img, err := cli.ImageInspect(ctx, info.Ref)
	require.NoError(t, err)
	labels := img.Config.Labels
	assert.Equal(t, strings.TrimPrefix(info.Ref, docker.SnapshotRepository+":"), labels[docker.LabelSnapshot])
	assert.Equal(t, docker.SnapshotFormatArchive, labels[docker.LabelSnapshotFormat])
	assert.Equal(t, "docker-test", labels[docker.LabelOwner])
	assert.Equal(t, "s1", labels[docker.LabelSession])
	src, err := inspect(t, sb.ID())
	require.NoError(t, err)
	assert.Equal(t, src.Image, labels[docker.LabelSnapshotBase])
	assert.InDelta(t, info.SizeBytes, imageGrowth(t, info.Ref, src.Image), 4096, "the engine keeps the archive, nothing else")
	info2 := snapshot(t, p, restored)
	img2, err := cli.ImageInspect(ctx, info2.Ref)
	require.NoError(t, err)
	assert.Equal(t, src.Image, img2.Config.Labels[docker.LabelSnapshotBase])

	// Deleted while a restored sandbox runs: that sandbox does not depend on it.
	require.NoError(t, p.DeleteSnapshot(ctx, info.Ref))
	require.NoError(t, p.DeleteSnapshot(ctx, info.Ref), "idempotent")
	_, err = cli.ImageInspect(ctx, img.ID)
	assert.True(t, cerrdefs.IsNotFound(err), "the image is gone at once: %v", err)
	_, err = p.Restore(ctx, info.Ref, agent, allowPol)
	require.True(t, fault.IsKind(err, fault.NotFound), "%v", err)
	assert.Equal(t, "v1v3", readAll(t, restored, "state.txt"))
	_, err = p.Restore(ctx, testImage, agent, allowPol)
	require.True(t, fault.IsKind(err, fault.NotFound), "an image that is not a snapshot: %v", err)
}

// The case: a 3 GiB file with no blocks snapshots into a few hundred bytes of image,
// and comes back 3 GiB long and as sparse as it was.
func TestSnapshotOfASparseFileIsSmall(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p, allowPol)
	sh(t, sb, "truncate -s 3G big.img && printf 'end' | dd of=big.img bs=1 seek=$((3*1024*1024*1024-3)) conv=notrunc 2>/dev/null && "+
		"test $(stat -c %b big.img) -lt 64")

	info := snapshot(t, p, sb)
	assert.Less(t, info.SizeBytes, int64(64<<10), "3 GiB of holes cost no archive")
	src, err := inspect(t, sb.ID())
	require.NoError(t, err)
	assert.Less(t, imageGrowth(t, info.Ref, src.Image), int64(1<<20), "nor engine storage")

	restored := restore(t, p, info.Ref, allowPol)
	out := sh(t, restored, "stat -c '%s %b' big.img && tail -c 3 big.img")
	fields := strings.Fields(out)
	require.Len(t, fields, 3, out)
	assert.Equal(t, strconv.Itoa(3<<30), fields[0])
	blocks, err := strconv.Atoi(fields[1])
	require.NoError(t, err)
	assert.Less(t, blocks, 2048, "restored sparse (%d blocks of 512 bytes)", blocks)
	assert.Equal(t, "end", fields[2])
}

// A paused sandbox is captured through the engine's archive API and stays paused; holes come
// from there as zeros, which compress to next to nothing and are holes again once restored.
func TestSnapshotOfAPausedSandbox(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	sb := create(t, p, allowPol)
	sh(t, sb, "mkdir -p empty/inner && echo kept > note.txt && chmod 640 note.txt && truncate -s 256M zeros.img && ln -s /etc/passwd outside")
	require.NoError(t, p.Pause(t.Context(), sb.ID()))
	t.Cleanup(func() { _ = p.Resume(context.Background(), sb.ID()) })

	info := snapshot(t, p, sb)
	assert.Less(t, info.SizeBytes, int64(1<<20), "256 MiB of zeros compress")
	ins, err := inspect(t, sb.ID())
	require.NoError(t, err)
	assert.True(t, ins.State.Paused, "the sandbox stays paused")

	restored := restore(t, p, info.Ref, allowPol)
	assert.Equal(t, "kept\n640\n/etc/passwd\n268435456\nempty/inner\n",
		sh(t, restored, "cat note.txt; stat -c %a note.txt; readlink outside; stat -c %s zeros.img; find empty -mindepth 1"))
	blocks, err := strconv.Atoi(strings.TrimSpace(sh(t, restored, "stat -c %b zeros.img")))
	require.NoError(t, err)
	assert.Less(t, blocks, 2048, "zeros are restored as a hole")
}

// legacySnapshot makes a snapshot image of the earlier format — the workspace (entries
// workspace/…, with owners) committed as a layer on the test image — and removes it when the
// test ends.
func legacySnapshot(t *testing.T, profile string, entries []tarEntryOf) string {
	t.Helper()
	ctx := t.Context()
	cli := engineClient(t)
	t.Cleanup(func() { _ = cli.Close() })
	id := newSnapshotID()
	ref := docker.SnapshotRepository + ":" + id
	base, err := cli.ImageInspect(ctx, testImage)
	require.NoError(t, err)
	labels := map[string]string{
		docker.LabelManagedBy: docker.ManagedBy, docker.LabelSnapshot: id, docker.LabelProfile: profile,
		docker.LabelSession: "old", docker.LabelSnapshotBase: base.ID,
	}
	tmp, err := cli.ContainerCreate(ctx, &container.Config{Image: testImage, Labels: labels, WorkingDir: docker.Workspace},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	require.NoError(t, err)
	defer func() {
		_ = cli.ContainerRemove(context.Background(), tmp.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	}()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range append([]tarEntryOf{{hdr: tar.Header{Name: "workspace/", Typeflag: tar.TypeDir, Mode: 0o1777}}}, entries...) {
		h := e.hdr
		h.Uid, h.Gid = 65532, 65532
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		require.NoError(t, tw.WriteHeader(&h))
		_, err := tw.Write(e.body)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, cli.CopyToContainer(ctx, tmp.ID, "/", &buf, container.CopyToContainerOptions{}))
	_, err = cli.ContainerCommit(ctx, tmp.ID, container.CommitOptions{Reference: ref})
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	return ref
}

type tarEntryOf struct {
	hdr  tar.Header
	body []byte
}

// Snapshots of the earlier format (the workspace as an image layer) still restore, through
// the same extraction as archives: modes and times kept, setuid dropped, a file of zeros
// restored as a hole, hard links kept.
func TestSnapshotsOfTheEarlierFormatRestore(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	mtime := time.Date(2023, 4, 5, 6, 7, 8, 0, time.UTC)
	ref := legacySnapshot(t, "p", []tarEntryOf{
		{hdr: tar.Header{Name: "workspace/src/", Typeflag: tar.TypeDir, Mode: 0o750, ModTime: mtime}},
		{hdr: tar.Header{Name: "workspace/src/main.py", Typeflag: tar.TypeReg, Mode: 0o640, ModTime: mtime}, body: []byte("print('old format')\n")},
		{hdr: tar.Header{Name: "workspace/tool", Typeflag: tar.TypeReg, Mode: 0o4755, ModTime: mtime}, body: []byte("#!/bin/sh\necho tool\n")},
		{hdr: tar.Header{Name: "workspace/zeros.bin", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: mtime}, body: make([]byte, 8<<20)},
		{hdr: tar.Header{Name: "workspace/hard", Typeflag: tar.TypeLink, Linkname: "workspace/src/main.py", Mode: 0o640, ModTime: mtime}},
		{hdr: tar.Header{Name: "workspace/link", Typeflag: tar.TypeSymlink, Linkname: "src/main.py", ModTime: mtime}},
	})

	restored := restore(t, p, ref, allowPol)
	assert.Equal(t, "old format\n", sh(t, restored, "python3 src/main.py"))
	assert.Equal(t, "750 640 755 2\nsrc/main.py\ntool\n2023-04-05 06:07:08\n",
		sh(t, restored, "echo $(stat -c %a src src/main.py tool) $(stat -c %h hard); readlink link; ./tool; TZ=UTC date -r src/main.py '+%Y-%m-%d %H:%M:%S'"))
	blocks, err := strconv.Atoi(strings.TrimSpace(sh(t, restored, "stat -c %b zeros.bin")))
	require.NoError(t, err)
	assert.Less(t, blocks, 64, "zeros are restored as a hole")

	// A snapshot of a sandbox restored from it is an archive on the same base.
	info := snapshot(t, p, restored)
	again := restore(t, p, info.Ref, allowPol)
	assert.Equal(t, "old format\n", sh(t, again, "python3 src/main.py"))
	require.NoError(t, p.DeleteSnapshot(t.Context(), ref))
	cli := engineClient(t)
	defer cli.Close()
	_, err = cli.ImageInspect(t.Context(), ref)
	assert.True(t, cerrdefs.IsNotFound(err), "%v", err)
}

// A restore replaces whatever the profile's image put in the workspace: the snapshot is the
// whole workspace, so a file deleted before the capture stays deleted.
func TestRestoreReplacesTheImagesWorkspace(t *testing.T) {
	t.Parallel()
	requireEngine(t)
	ctx := t.Context()
	cli := engineClient(t)
	t.Cleanup(func() { _ = cli.Close() }) // after the image's removal below
	tmp, err := cli.ContainerCreate(ctx, &container.Config{Image: testImage}, &container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	require.NoError(t, err)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "workspace/from-the-image.txt", Typeflag: tar.TypeReg, Mode: 0o666, Size: 5, Uid: 65532, Gid: 65532}))
	_, _ = tw.Write([]byte("image"))
	require.NoError(t, tw.Close())
	require.NoError(t, cli.CopyToContainer(ctx, tmp.ID, "/", &buf, container.CopyToContainerOptions{}))
	img := "sandgate-test/workspace-content:" + strings.ToLower(newSnapshotID()[:12])
	_, err = cli.ContainerCommit(ctx, tmp.ID, container.CommitOptions{Reference: img})
	require.NoError(t, cli.ContainerRemove(ctx, tmp.ID, container.RemoveOptions{Force: true}))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = cli.ImageRemove(context.Background(), img, image.RemoveOptions{Force: true, PruneChildren: true})
	})

	p := newProvider(t, func(o *docker.Options) { o.Config.Image = img })
	sb := create(t, p, allowPol)
	assert.Equal(t, "image", readAll(t, sb, "from-the-image.txt"))
	sh(t, sb, "rm from-the-image.txt && echo mine > mine.txt")
	info := snapshot(t, p, sb)
	restored := restore(t, p, info.Ref, allowPol)
	assert.Equal(t, "mine.txt\n", sh(t, restored, "ls"))
}

// A bounded workspace (disk_mb) takes a snapshot whose files are longer than the bound but
// hold less (the 4 GiB sparse file on a small disk); one whose files hold more is
// refused as too large, and the sandbox made for it goes with its disk.
func TestRestoreIntoABoundedWorkspace(t *testing.T) {
	t.Parallel()
	p, disks := newDiskProvider(t)
	sb := create(t, p, diskPol)
	sh(t, sb, "truncate -s 4G big.img && echo data > data.txt")
	info := snapshot(t, p, sb)
	assert.Less(t, info.SizeBytes, int64(64<<10))
	restored := restore(t, p, info.Ref, diskPol)
	diskOf(t, disks, restored.ID())
	assert.Equal(t, "4294967296\ndata\n", sh(t, restored, "stat -c %s big.img; cat data.txt"))
	used, err := strconv.Atoi(strings.TrimSpace(sh(t, restored, "df -k --output=used /workspace | tail -1")))
	require.NoError(t, err)
	assert.Less(t, used, 8<<10, "the disk holds what the files hold (%d KiB used)", used)

	// 40 MiB of random bytes cannot fit 24 MiB.
	free := newProvider(t)
	big := create(t, free, allowPol)
	sh(t, big, "head -c 40M /dev/urandom > random.bin")
	bigInfo := snapshot(t, free, big)
	cli := engineClient(t)
	defer cli.Close()
	count := func() int {
		list, err := cli.ContainerList(t.Context(), container.ListOptions{All: true, Filters: filters.NewArgs(
			filters.Arg("label", docker.LabelProfile+"="+profileOf(t, sb.ID())))})
		require.NoError(t, err)
		return len(list)
	}
	images := func() []string {
		m, err := filepath.Glob(filepath.Join(disks, "*.img"))
		require.NoError(t, err)
		return m
	}
	before, beforeDisks := count(), images()
	_, err = p.Restore(t.Context(), bigInfo.Ref, agent, diskPol)
	require.True(t, fault.IsKind(err, fault.TooLarge), "%v", err)
	assert.Contains(t, err.Error(), "disk_mb")
	assert.Equal(t, before, count(), "the sandbox made for the restore is removed")
	assert.Equal(t, beforeDisks, images(), "and its disk")
}

// signalSandboxd sends sig to container id's sandboxd from the engine's host (as the test's
// user, root where the engine tests run), found by the engine's process list.
func signalSandboxd(t *testing.T, id string, sig syscall.Signal) {
	t.Helper()
	cli := engineClient(t)
	defer cli.Close()
	top, err := cli.ContainerTop(context.Background(), id, []string{"-eo", "pid,args"})
	require.NoError(t, err)
	sent := false
	for _, proc := range top.Processes {
		if len(proc) == 2 && strings.HasSuffix(strings.Fields(proc[1])[0], "/sandboxd") {
			pid, err := strconv.Atoi(proc[0])
			require.NoError(t, err)
			require.NoError(t, syscall.Kill(pid, sig))
			sent = true
		}
	}
	require.True(t, sent, "no sandboxd among %v", top.Processes)
}

// A sandbox whose sandboxd does not answer (here stopped from outside) is still captured,
// through the engine's archive API, after a bounded wait.
func TestSnapshotWhenSandboxdDoesNotAnswer(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and not root: stopping a container's sandboxd from the host needs root")
		}
		t.Skip("stopping a container's sandboxd from the host needs root")
	}
	p := newProvider(t)
	sb := create(t, p, allowPol)
	sh(t, sb, "echo kept > note.txt")
	signalSandboxd(t, sb.ID(), syscall.SIGSTOP)
	t.Cleanup(func() { signalSandboxd(t, sb.ID(), syscall.SIGCONT) })

	info := snapshot(t, p, sb)
	restored := restore(t, p, info.Ref, allowPol)
	assert.Equal(t, "kept\n", readAll(t, restored, "note.txt"))
}
