//go:build unix

package local_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// A snapshot is a copy of the sandbox folder: files, folders and symlinks with their modes.
// A sandbox restored from it starts with that copy; what changed afterwards is in neither.
func TestSnapshotCopiesTheFolder(t *testing.T) {
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

	id := "0123456789abcdef0123456789abcdef"
	info, err := p.Snapshot(ctx, dir, providers.SnapshotMeta{ID: id})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(p.Workdir(), local.SnapshotPrefix+id), info.Ref)
	assert.Equal(t, int64(5), info.SizeBytes)
	_, err = p.Snapshot(ctx, dir, providers.SnapshotMeta{ID: id})
	assert.True(t, fault.IsKind(err, fault.Conflict), "%v", err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "later.txt"), []byte("later"), 0o644))

	restored, err := p.Restore(ctx, info.Ref, agent, pol)
	require.NoError(t, err)
	rdir := restored.ID()
	assert.NotEqual(t, dir, rdir)
	b, err := os.ReadFile(filepath.Join(rdir, "a/b/f.txt"))
	require.NoError(t, err)
	assert.Equal(t, "12345", string(b))
	st, err := os.Stat(filepath.Join(rdir, "a/b/f.txt"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
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
	require.NoError(t, p.Destroy(ctx, dir))
	require.NoError(t, p.Destroy(ctx, rdir))
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
