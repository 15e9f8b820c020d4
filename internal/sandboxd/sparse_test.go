//go:build linux

package sandboxd_test

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandboxd"
)

// allocated is the room path takes on its file system (its blocks), in bytes.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &st))
	return st.Blocks * 512
}

// sparseFile makes a file of size bytes at path holding only data (at their offsets): the
// rest are holes. It skips the test where the file system keeps no holes.
func sparseFile(t *testing.T, path string, size int64, data map[int64]string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	for off, s := range data {
		_, err := f.WriteAt([]byte(s), off)
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	if allocated(t, path) > 1<<20 {
		t.Skipf("the file system of %s keeps no holes", path)
	}
}

// readAt reads len(want) bytes of path at off.
func readAt(t *testing.T, path string, off int64, n int) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, n)
	_, err = f.ReadAt(b, off)
	require.NoError(t, err)
	return string(b)
}

// A sparse file is archived as its data, not its length in zeros, and comes back sparse,
// with its length, content, mode and time; also under a long name with non-ASCII letters.
func TestArchiveKeepsHoles(t *testing.T) {
	src, dst := setup(t), setup(t)
	const size = 1 << 30
	long := strings.Repeat("dossier-é/", 12) + "disk.img" // > 100 bytes: the PAX header names it
	data := map[int64]string{0: "head", 512<<20 + 3: "middle", size - 4: "tail"}
	sparseFile(t, filepath.Join(src.workspace, long), size, data)
	sparseFile(t, filepath.Join(src.workspace, "nothing.img"), 64<<20, nil)
	mtime := time.Date(2025, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	require.NoError(t, os.Chtimes(filepath.Join(src.workspace, long), mtime, mtime))
	require.NoError(t, os.Chmod(filepath.Join(src.workspace, long), 0o640))

	var buf bytes.Buffer
	st, err := src.rt.ArchiveWorkspace(t.Context(), &buf)
	require.NoError(t, err)
	assert.Less(t, buf.Len(), 64<<10, "1 GiB of holes costs no archive")
	assert.Equal(t, int64(size+64<<20), st.Bytes, "Bytes counts the files' lengths")
	assert.LessOrEqual(t, st.DataBytes, int64(4*4096), "DataBytes counts their data regions")

	got, err := dst.rt.ExtractWorkspace(t.Context(), bytes.NewReader(buf.Bytes()), 1<<20)
	require.NoError(t, err, "the limit bounds the bytes written, not the files' lengths")
	assert.Equal(t, st.Bytes, got.Bytes)
	assert.LessOrEqual(t, got.DataBytes, int64(3*4096), "only the blocks that are not zeros are written")
	out := filepath.Join(dst.workspace, long)
	fi, err := os.Stat(out)
	require.NoError(t, err)
	assert.Equal(t, int64(size), fi.Size())
	assert.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
	assert.True(t, fi.ModTime().Equal(mtime), "%v", fi.ModTime())
	assert.Less(t, allocated(t, out), int64(1<<20), "restored sparse")
	for off, s := range data {
		assert.Equal(t, s, readAt(t, out, off, len(s)))
	}
	assert.Equal(t, string(make([]byte, 16)), readAt(t, out, 256<<20, 16), "a hole reads as zeros")
	fi, err = os.Stat(filepath.Join(dst.workspace, "nothing.img"))
	require.NoError(t, err)
	assert.Equal(t, int64(64<<20), fi.Size(), "a file that is one hole keeps its length")
}

// Runs of zero blocks are written as holes whatever the archive says: a file of zeros
// archived in full takes no room when extracted, and the zeros do not count against the
// limit; data does.
func TestExtractWritesZeroRunsAsHoles(t *testing.T) {
	b := setup(t)
	body := make([]byte, 8<<20)
	copy(body[3<<20:], "x")
	raw := makeTar(t, file("zeros.bin", string(body)))
	st, err := b.rt.ExtractWorkspace(t.Context(), bytes.NewReader(raw), 4096)
	require.NoError(t, err)
	assert.Equal(t, sandboxd.ArchiveStats{Entries: 1, Bytes: 8 << 20, DataBytes: 4096}, st)
	out := filepath.Join(b.workspace, "zeros.bin")
	assert.Less(t, allocated(t, out), int64(1<<20))
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, body, got)

	random := make([]byte, 2<<20)
	_, _ = rand.Read(random)
	_, err = setup(t).rt.ExtractWorkspace(t.Context(), bytes.NewReader(makeTar(t, file("random.bin", string(random)))), 1<<20)
	requireKind(t, err, fault.TooLarge)
}

// GNU tar reads the sparse entries ArchiveWorkspace writes, and ExtractWorkspace reads the
// sparse archives GNU tar writes (old GNU, PAX 0.1 and PAX 1.0), holes kept both ways.
func TestSparseArchivesAreGNUTars(t *testing.T) {
	bin, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("no tar on PATH")
	}
	if v, _ := exec.Command(bin, "--version").Output(); !strings.Contains(string(v), "GNU tar") {
		t.Skip("tar on PATH is not GNU tar")
	}
	const size = 256 << 20
	data := map[int64]string{100: "first", 100 << 20: "second", size - 1: "!"}
	check := func(t *testing.T, path string) {
		t.Helper()
		fi, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, int64(size), fi.Size())
		assert.Less(t, allocated(t, path), int64(1<<20), "sparse")
		for off, s := range data {
			assert.Equal(t, s, readAt(t, path, off, len(s)))
		}
	}

	t.Run("ours_read_by_gnu_tar", func(t *testing.T) {
		src := setup(t)
		sparseFile(t, filepath.Join(src.workspace, "d/sparse.img"), size, data)
		var buf bytes.Buffer
		_, err := src.rt.ArchiveWorkspace(t.Context(), &buf)
		require.NoError(t, err)
		out := t.TempDir()
		cmd := exec.Command(bin, "-xf", "-", "-C", out)
		cmd.Stdin = &buf
		msg, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", msg)
		check(t, filepath.Join(out, "d/sparse.img"))
		_, err = os.Stat(filepath.Join(out, "d/GNUSparseFile.0"))
		assert.True(t, os.IsNotExist(err), "GNU tar takes the real name from the PAX header")
	})
	for name, args := range map[string][]string{
		"gnu":     {"--format=gnu"},
		"pax_0.1": {"--format=posix", "--sparse-version=0.1"},
		"pax_1.0": {"--format=posix", "--sparse-version=1.0"},
	} {
		t.Run(name+"_read_by_ours", func(t *testing.T) {
			in := t.TempDir()
			sparseFile(t, filepath.Join(in, "sparse.img"), size, data)
			cmd := exec.Command(bin, append(append([]string{"-c", "--sparse"}, args...), "-f", "-", "-C", in, "sparse.img")...)
			var arch, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &arch, &stderr
			require.NoError(t, cmd.Run(), "%s", stderr.String())
			tr := tar.NewReader(bytes.NewReader(arch.Bytes()))
			hdr, err := tr.Next()
			require.NoError(t, err)
			assert.Equal(t, "sparse.img", hdr.Name)
			b := setup(t)
			_, err = b.rt.ExtractWorkspace(t.Context(), bytes.NewReader(arch.Bytes()), 1<<20)
			require.NoError(t, err)
			check(t, filepath.Join(b.workspace, "sparse.img"))
		})
	}
}
