//go:build unix

package sandboxd_test

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// A workspace archived and extracted into another one comes back as it was: folders, files
// with any bytes, symlinks as links (also ones pointing out), modes and modification times;
// what is not content (a FIFO) is left out.
func TestArchiveRoundTrip(t *testing.T) {
	src, dst := setup(t), setup(t)
	ws := src.workspace
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	binary := []byte{0, 1, 2, 0xff, 0xfe, '\n', 0}
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "a/b/c"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "a/b/c/bin.dat"), binary, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "empty"), nil, 0o644))
	require.NoError(t, os.Chtimes(filepath.Join(ws, "run.sh"), mtime, mtime))
	require.NoError(t, os.Symlink("a/b/c/bin.dat", filepath.Join(ws, "inside")))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(ws, "outside")))
	require.NoError(t, os.Symlink("../../..", filepath.Join(ws, "a/up")))
	require.NoError(t, os.Mkdir(filepath.Join(ws, "ro"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "ro/f"), []byte("x"), 0o444))
	require.NoError(t, os.Chmod(filepath.Join(ws, "ro"), 0o555))
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(ws, "ro"), 0o755) })
	require.NoError(t, os.Chtimes(filepath.Join(ws, "a/b"), mtime, mtime))
	require.NoError(t, syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o644))

	var buf bytes.Buffer
	st, err := src.rt.ArchiveWorkspace(t.Context(), &buf)
	require.NoError(t, err)
	// a, a/b, a/b/c, bin.dat, run.sh, empty, inside, outside, a/up, ro, ro/f
	size := int64(len(binary)) + 18 + 1
	assert.Equal(t, sandboxd.ArchiveStats{Entries: 11, Bytes: size, DataBytes: size}, st)

	got, err := dst.rt.ExtractWorkspace(t.Context(), bytes.NewReader(buf.Bytes()), -1)
	require.NoError(t, err)
	assert.Equal(t, st, got)
	out := dst.workspace
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(out, "ro"), 0o755) })
	b, err := os.ReadFile(filepath.Join(out, "a/b/c/bin.dat"))
	require.NoError(t, err)
	assert.Equal(t, binary, b)
	fi, err := os.Lstat(filepath.Join(out, "a/b/c/bin.dat"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	fi, err = os.Lstat(filepath.Join(out, "run.sh"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
	assert.True(t, fi.ModTime().Equal(mtime), "%v", fi.ModTime())
	fi, err = os.Lstat(filepath.Join(out, "a/b"))
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	assert.True(t, fi.ModTime().Equal(mtime), "a folder's time is set after its content: %v", fi.ModTime())
	fi, err = os.Lstat(filepath.Join(out, "ro"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o555), fi.Mode().Perm())
	for name, want := range map[string]string{"inside": "a/b/c/bin.dat", "outside": "/etc/passwd", "a/up": "../../.."} {
		link, err := os.Readlink(filepath.Join(out, name))
		require.NoError(t, err, name)
		assert.Equal(t, want, link, name)
	}
	_, err = os.Lstat(filepath.Join(out, "fifo"))
	assert.True(t, os.IsNotExist(err), "a FIFO is not content")

	// Only into an empty workspace.
	_, err = dst.rt.ExtractWorkspace(t.Context(), bytes.NewReader(buf.Bytes()), -1)
	requireKind(t, err, fault.Conflict)
	// An empty workspace gives an empty (but complete) archive.
	buf.Reset()
	st, err = setup(t).rt.ArchiveWorkspace(t.Context(), &buf)
	require.NoError(t, err)
	assert.Zero(t, st)
	_, err = tar.NewReader(&buf).Next()
	assert.ErrorIs(t, err, io.EOF)
}

// tarEntry is one entry of a hand-made archive.
type tarEntry struct {
	hdr  tar.Header
	body string
}

func makeTar(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if h.Mode == 0 && h.Typeflag != tar.TypeXGlobalHeader {
			h.Mode = 0o644
		}
		require.NoError(t, tw.WriteHeader(&h))
		if e.body != "" {
			_, err := tw.Write([]byte(e.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

func file(name, body string) tarEntry {
	return tarEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg}, body: body}
}

func symlink(name, target string) tarEntry {
	return tarEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target}}
}

// Hostile archives are refused, nothing is written outside the workspace, and the workspace
// is left empty.
func TestExtractRefusesHostileArchives(t *testing.T) {
	outside := t.TempDir()
	for name, tt := range map[string]struct {
		entries []tarEntry
		raw     []byte
		max     int64
		kind    fault.Kind
	}{
		"absolute name":          {entries: []tarEntry{file(filepath.Join(outside, "abs"), "x")}, kind: fault.Policy},
		"dot-dot":                {entries: []tarEntry{file("../escape", "x")}, kind: fault.Policy},
		"dot-dot inside":         {entries: []tarEntry{file("a/../../escape", "x")}, kind: fault.Policy},
		"dot-dot harmless":       {entries: []tarEntry{file("a/../b", "x")}, kind: fault.Policy},
		"through own symlink":    {entries: []tarEntry{symlink("l", outside), file("l/escape", "x")}, kind: fault.Policy},
		"through inner symlink":  {entries: []tarEntry{{hdr: tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}}, symlink("l", "d"), file("l/f", "x")}, kind: fault.Policy},
		"over a symlink":         {entries: []tarEntry{symlink("l", filepath.Join(outside, "target")), file("l", "x")}, kind: fault.Validation},
		"hard link outside":      {entries: []tarEntry{{hdr: tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"}}}, kind: fault.Policy},
		"hard link up":           {entries: []tarEntry{{hdr: tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "../x"}}}, kind: fault.Policy},
		"hard link to a symlink": {entries: []tarEntry{symlink("l", "/etc/passwd"), {hdr: tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "l"}}}, kind: fault.Policy},
		"char device":            {entries: []tarEntry{{hdr: tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}}, kind: fault.Policy},
		"block device":           {entries: []tarEntry{{hdr: tar.Header{Name: "sda", Typeflag: tar.TypeBlock, Devmajor: 8}}}, kind: fault.Policy},
		"fifo":                   {entries: []tarEntry{{hdr: tar.Header{Name: "p", Typeflag: tar.TypeFifo}}}, kind: fault.Validation},
		"twice":                  {entries: []tarEntry{file("f", "1"), file("f", "2")}, kind: fault.Validation},
		"inside a file":          {entries: []tarEntry{file("f", "1"), file("f/g", "2")}, kind: fault.Validation},
		"too large":              {entries: []tarEntry{file("a", "12345"), file("b", "67890")}, max: 9, kind: fault.TooLarge},
		"not a tar":              {raw: bytes.Repeat([]byte("garbage!"), 100), kind: fault.Validation},
		"cut short":              {raw: makeTar(t, file("f", string(bytes.Repeat([]byte("x"), 5000))))[:2048], kind: fault.Validation},
	} {
		t.Run(name, func(t *testing.T) {
			b := setup(t)
			raw := tt.raw
			if raw == nil {
				raw = makeTar(t, append([]tarEntry{file("first", "kept until the error")}, tt.entries...)...)
			}
			max := int64(-1)
			if tt.max > 0 {
				max = tt.max
			}
			_, err := b.rt.ExtractWorkspace(t.Context(), bytes.NewReader(raw), max)
			requireKind(t, err, tt.kind)
			left, err := os.ReadDir(b.workspace)
			require.NoError(t, err)
			assert.Empty(t, left, "a failed extraction leaves an empty workspace")
			escaped, err := os.ReadDir(outside)
			require.NoError(t, err)
			assert.Empty(t, escaped, "nothing is written outside the workspace")
		})
	}
}

// Archives made by other tools: a "./" root entry, missing parent folders, in-archive hard
// links, a global PAX header; setuid and setgid bits are dropped, the sticky bit kept.
func TestExtractAcceptsOrdinaryArchives(t *testing.T) {
	b := setup(t)
	raw := makeTar(t,
		tarEntry{hdr: tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"comment": "x"}}},
		tarEntry{hdr: tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}},
		file("./deep/er/f.txt", "content"),
		tarEntry{hdr: tar.Header{Name: "deep/hard", Typeflag: tar.TypeLink, Linkname: "./deep/er/f.txt"}},
		tarEntry{hdr: tar.Header{Name: "deep/", Typeflag: tar.TypeDir, Mode: 0o750}},
		tarEntry{hdr: tar.Header{Name: "tool", Typeflag: tar.TypeReg, Mode: 0o4755}, body: "#!"},
		tarEntry{hdr: tar.Header{Name: "group", Typeflag: tar.TypeReg, Mode: 0o2750}, body: "g"},
		tarEntry{hdr: tar.Header{Name: "shared/", Typeflag: tar.TypeDir, Mode: 0o3777}},
	)
	st, err := b.rt.ExtractWorkspace(context.Background(), bytes.NewReader(raw), 100)
	require.NoError(t, err)
	// deep, deep/er, f.txt, hard, tool, group, shared
	assert.Equal(t, sandboxd.ArchiveStats{Entries: 7, Bytes: 10, DataBytes: 10}, st)
	data, err := os.ReadFile(filepath.Join(b.workspace, "deep/hard"))
	require.NoError(t, err)
	assert.Equal(t, "content", string(data))
	fi, err := os.Stat(filepath.Join(b.workspace, "deep"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o750), fi.Mode().Perm())
	fi, err = os.Stat(filepath.Join(b.workspace, "deep/er"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm(), "a missing parent is made 0755")
	special := os.ModeSetuid | os.ModeSetgid | os.ModeSticky | os.ModePerm
	for name, want := range map[string]os.FileMode{"tool": 0o755, "group": 0o750, "shared": os.ModeSticky | 0o777} {
		fi, err = os.Stat(filepath.Join(b.workspace, name))
		require.NoError(t, err)
		assert.Equal(t, want, fi.Mode()&special, "%s: setuid and setgid dropped, sticky kept", name)
	}
}

// A cancelled extraction stops and empties the workspace; a cancelled archive stops.
func TestArchiveCancellation(t *testing.T) {
	b := setup(t)
	require.NoError(t, os.WriteFile(filepath.Join(b.workspace, "f"), []byte("x"), 0o644))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := b.rt.ArchiveWorkspace(ctx, io.Discard)
	require.ErrorIs(t, err, context.Canceled)
	_, err = setup(t).rt.ExtractWorkspace(ctx, bytes.NewReader(makeTar(t, file("f", "x"))), -1)
	require.ErrorIs(t, err, context.Canceled)
}

// A file with several names is archived once, its other names as hard links to it, and comes
// back as one file with several names.
func TestArchiveKeepsHardLinks(t *testing.T) {
	src, dst := setup(t), setup(t)
	require.NoError(t, os.WriteFile(filepath.Join(src.workspace, "a"), []byte("shared"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(src.workspace, "d"), 0o755))
	require.NoError(t, os.Link(filepath.Join(src.workspace, "a"), filepath.Join(src.workspace, "d/b")))
	var buf bytes.Buffer
	st, err := src.rt.ArchiveWorkspace(t.Context(), &buf)
	require.NoError(t, err)
	assert.Equal(t, sandboxd.ArchiveStats{Entries: 3, Bytes: 6, DataBytes: 6}, st, "the content once")
	_, err = dst.rt.ExtractWorkspace(t.Context(), &buf, -1)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dst.workspace, "d/b"), []byte("SHARED"), 0o644))
	b, err := os.ReadFile(filepath.Join(dst.workspace, "a"))
	require.NoError(t, err)
	assert.Equal(t, "SHARED", string(b), "one file, two names")
}
