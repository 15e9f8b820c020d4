//go:build unix

package local_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// A snapshot is an archive file of the sandbox folder: files, folders and symlinks with
// their modes and times. A sandbox restored from it starts with those; what changed
// afterwards is in neither.
func TestSnapshotArchivesTheFolder(t *testing.T) {
	p := newProvider(t)
	ctx := t.Context()
	caps := p.Capabilities()
	require.True(t, caps.Snapshots)
	require.True(t, caps.PreviewPorts)
	require.False(t, caps.Pause, "nothing freezes a folder's processes")
	sb, err := p.Create(ctx, agent, pol)
	require.NoError(t, err)
	dir := sb.ID()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "a/b"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a/b/f.txt"), []byte("12345"), 0o600))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "outside")))
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	require.NoError(t, os.Chtimes(filepath.Join(dir, "a/b/f.txt"), mtime, mtime))

	id := "0123456789abcdef0123456789abcdef"
	info, err := p.Snapshot(ctx, dir, providers.SnapshotMeta{ID: id})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(p.Workdir(), local.SnapshotPrefix+id+local.SnapshotSuffix), info.Ref)
	st, err := os.Stat(info.Ref)
	require.NoError(t, err)
	assert.Equal(t, st.Size(), info.SizeBytes, "the size is the archive's, what the snapshot takes")
	_, err = p.Snapshot(ctx, dir, providers.SnapshotMeta{ID: id})
	assert.True(t, fault.IsKind(err, fault.Conflict), "%v", err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "later.txt"), []byte("later"), 0o644))
	left, err := filepath.Glob(filepath.Join(p.Workdir(), ".sandgate-snapshot-*"))
	require.NoError(t, err)
	assert.Empty(t, left, "no temporary file is left")

	restored, err := p.Restore(ctx, info.Ref, agent, pol)
	require.NoError(t, err)
	rdir := restored.ID()
	assert.NotEqual(t, dir, rdir)
	b, err := os.ReadFile(filepath.Join(rdir, "a/b/f.txt"))
	require.NoError(t, err)
	assert.Equal(t, "12345", string(b))
	st, err = os.Stat(filepath.Join(rdir, "a/b/f.txt"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	assert.True(t, st.ModTime().Equal(mtime), "the modification time is kept: %v", st.ModTime())
	link, err := os.Readlink(filepath.Join(rdir, "outside"))
	require.NoError(t, err)
	assert.Equal(t, "/etc/passwd", link, "a symlink is copied as a link, not followed")
	_, err = os.Stat(filepath.Join(rdir, "later.txt"))
	assert.True(t, os.IsNotExist(err))

	require.NoError(t, p.DeleteSnapshot(ctx, info.Ref))
	require.NoError(t, p.DeleteSnapshot(ctx, info.Ref))
	require.NoError(t, p.DeleteSnapshot(ctx, dir), "a sandbox folder is not a snapshot: left alone")
	_, err = os.Stat(dir)
	require.NoError(t, err)
	_, err = p.Restore(ctx, info.Ref, agent, pol)
	assert.True(t, fault.IsKind(err, fault.NotFound), "%v", err)
	_, err = p.Snapshot(ctx, "/etc", providers.SnapshotMeta{ID: id})
	assert.True(t, fault.IsKind(err, fault.Gone), "%v", err)
	for _, ref := range []string{"/etc/passwd", filepath.Join(p.Workdir(), "x.tar.gz"), filepath.Join(p.Workdir(), local.SnapshotPrefix+"zz"+local.SnapshotSuffix)} {
		_, err = p.Restore(ctx, ref, agent, pol)
		assert.True(t, fault.IsKind(err, fault.NotFound), "%s: %v", ref, err)
	}
	require.NoError(t, p.Destroy(ctx, dir))
	require.NoError(t, p.Destroy(ctx, rdir))
}

// A sparse file costs its data, not its length, in a snapshot, and comes back sparse, so
// it fits a bounded workspace; files that hold more than disk_mb are refused and leave no
// sandbox behind.
func TestSnapshotKeepsSparseFilesSparse(t *testing.T) {
	p := newProvider(t)
	ctx := t.Context()
	sb, err := p.Create(ctx, agent, pol)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), sb.ID()) })
	img := filepath.Join(sb.ID(), "disk.img")
	f, err := os.Create(img)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(3<<30))
	_, err = f.WriteAt([]byte("end"), 3<<30-3)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	if allocated(t, img) > 1<<20 {
		t.Skip("the workdir's file system keeps no holes")
	}

	info, err := p.Snapshot(ctx, sb.ID(), providers.SnapshotMeta{ID: "00000000000000000000000000000001"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.DeleteSnapshot(context.Background(), info.Ref) })
	assert.Less(t, info.SizeBytes, int64(64<<10), "3 GiB of holes cost no storage")
	small := pol
	small.Strict, small.DiskMB = false, 1
	restored, err := p.Restore(ctx, info.Ref, agent, small)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), restored.ID()) })
	out := filepath.Join(restored.ID(), "disk.img")
	st, err := os.Stat(out)
	require.NoError(t, err)
	assert.Equal(t, int64(3<<30), st.Size())
	assert.Less(t, allocated(t, out), int64(1<<20), "restored sparse")

	random := make([]byte, 2<<20)
	_, _ = rand.Read(random)
	require.NoError(t, os.WriteFile(filepath.Join(sb.ID(), "random.bin"), random, 0o644))
	big, err := p.Snapshot(ctx, sb.ID(), providers.SnapshotMeta{ID: "00000000000000000000000000000002"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.DeleteSnapshot(context.Background(), big.Ref) })
	before, err := filepath.Glob(filepath.Join(p.Workdir(), local.SandboxPrefix+"*"))
	require.NoError(t, err)
	_, err = p.Restore(ctx, big.Ref, agent, small)
	assert.True(t, fault.IsKind(err, fault.TooLarge), "%v", err)
	after, err := filepath.Glob(filepath.Join(p.Workdir(), local.SandboxPrefix+"*"))
	require.NoError(t, err)
	assert.Equal(t, before, after, "the folder of a failed restore is removed")
}

// Snapshots of the earlier format — a folder holding a copy of the workspace — are still
// restored (as archives are: modes kept, setuid dropped) and deleted.
func TestSnapshotFoldersOfTheEarlierFormatRestore(t *testing.T) {
	p := newProvider(t)
	ctx := t.Context()
	ref := filepath.Join(p.Workdir(), local.SnapshotPrefix+"00000000000000000000000000000003")
	require.NoError(t, os.MkdirAll(filepath.Join(ref, "src"), 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(ref, "src/main.py"), []byte("print(1)\n"), 0o640))
	require.NoError(t, os.WriteFile(filepath.Join(ref, "tool"), []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, os.Chmod(filepath.Join(ref, "tool"), 0o4755))
	require.NoError(t, os.Symlink("src/main.py", filepath.Join(ref, "link")))

	restored, err := p.Restore(ctx, ref, agent, pol)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(context.Background(), restored.ID()) })
	b, err := os.ReadFile(filepath.Join(restored.ID(), "src/main.py"))
	require.NoError(t, err)
	assert.Equal(t, "print(1)\n", string(b))
	for name, want := range map[string]os.FileMode{"src": os.ModeDir | 0o750, "src/main.py": 0o640, "tool": 0o755} {
		st, err := os.Stat(filepath.Join(restored.ID(), name))
		require.NoError(t, err)
		assert.Equal(t, want, st.Mode(), name)
	}
	link, err := os.Readlink(filepath.Join(restored.ID(), "link"))
	require.NoError(t, err)
	assert.Equal(t, "src/main.py", link)

	require.NoError(t, p.DeleteSnapshot(ctx, ref))
	_, err = os.Stat(ref)
	assert.True(t, os.IsNotExist(err), "deleted")
}

// allocated is the room path takes on its file system (its blocks), in bytes.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &st))
	return st.Blocks * 512
}

// A preview port of a local sandbox is the host's loopback.
func TestDialPortIsTheHostLoopback(t *testing.T) {
	p := newProvider(t)
	sb, err := p.Create(t.Context(), agent, pol)
	require.NoError(t, err)
	defer func() { _ = p.Destroy(t.Context(), sb.ID()) }()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hi") })}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	conn, err := sb.(providers.PortDialer).DialPort(t.Context(), ln.Addr().(*net.TCPAddr).Port)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "hi", string(body))
}
