package spool_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/spool"
)

// Records go in and out whole, one file per id, and survive the Spool value: a new Open of
// the folder (a restarted gateway) finds them.
func TestRecordsOutliveTheProcess(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state", "spool")
	s, err := spool.Open(dir, 1<<20)
	require.NoError(t, err)
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "made private: records hold programs' output")

	require.NoError(t, s.Put("aa01", []byte(`{"first":1}`)))
	require.NoError(t, s.Put("bb02", []byte(`{"second":2}`)))
	require.NoError(t, s.Put("aa01", []byte(`{"first":"again"}`)), "a Put replaces the record of its id")

	again, err := spool.Open(dir, 1<<20)
	require.NoError(t, err)
	ids, err := again.IDs()
	require.NoError(t, err)
	slices.Sort(ids)
	require.Equal(t, []string{"aa01", "bb02"}, ids)
	b, err := again.Get("aa01")
	require.NoError(t, err)
	require.Equal(t, `{"first":"again"}`, string(b))

	require.NoError(t, again.Remove("aa01"))
	require.NoError(t, again.Remove("aa01"), "removing what is gone is no error")
	_, err = again.Get("aa01")
	require.ErrorIs(t, err, fs.ErrNotExist)
	ids, err = again.IDs()
	require.NoError(t, err)
	require.Equal(t, []string{"bb02"}, ids)
}

// The bound counts the bytes of every record (a replaced one counts once); past it Put says
// so and stores nothing.
func TestBoundedInBytes(t *testing.T) {
	t.Parallel()
	s, err := spool.Open(t.TempDir(), 10)
	require.NoError(t, err)
	require.NoError(t, s.Put("a", []byte("123456")))
	err = s.Put("b", []byte("12345"))
	require.ErrorIs(t, err, spool.ErrFull)
	require.Contains(t, err.Error(), "bound of 10 bytes")
	require.NoError(t, s.Put("a", []byte("1234567890")), "replacing a record counts its new size only")
	ids, err := s.IDs()
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, ids)
	require.NoError(t, s.Remove("a"))
	require.NoError(t, s.Put("b", []byte("12345")), "room again once records were removed")

	_, err = spool.Open(t.TempDir(), 0)
	require.Error(t, err, "a bound of nothing is a mistake")
}

// What an interrupted Put left (a temporary file) is never a record and goes at the next
// Open; files that are not records are ignored.
func TestInterruptedWritesAreNoRecords(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".tmp-cc03-123"), []byte(`{"half`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "README"), []byte("not a record"), 0o600))
	s, err := spool.Open(dir, 1<<20)
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(dir, ".tmp-cc03-123"))
	require.ErrorIs(t, err, fs.ErrNotExist)
	ids, err := s.IDs()
	require.NoError(t, err)
	require.Empty(t, ids)
}

// Ids name files in the folder and nothing else: no separators, no dots, no empty name.
func TestIDsCannotLeaveTheFolder(t *testing.T) {
	t.Parallel()
	s, err := spool.Open(t.TempDir(), 1<<20)
	require.NoError(t, err)
	for _, id := range []string{"", "../x", "a/b", ".hidden", "a.rec", string(make([]byte, 129))} {
		require.Error(t, s.Put(id, []byte("x")), "%q", id)
		_, err := s.Get(id)
		require.Error(t, err, "%q", id)
		require.Error(t, s.Remove(id), "%q", id)
	}
}

// A folder the process cannot make or write is refused at Open, not at the first outage.
func TestUnwritableFolderRefused(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err := spool.Open(filepath.Join(file, "spool"), 1<<20)
	require.Error(t, err, "a folder under a file cannot be made")
	if os.Geteuid() == 0 {
		return // root writes everywhere: the permission case needs another user
	}
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o500))
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	_, err = spool.Open(dir, 1<<20)
	require.ErrorIs(t, err, fs.ErrPermission)
}
