package wspath_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/wspath"
)

func TestClean(t *testing.T) {
	for in, want := range map[string]string{"": ".", ".": ".", "a//b/./c/": "a/b/c", "a/../b": "b", "%2e%2e": "%2e%2e"} {
		got, err := wspath.Clean(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"..", "../x", "/etc/passwd", "a/../../x", "x\x00y"} {
		_, err := wspath.Clean(in)
		assert.True(t, fault.IsKind(err, fault.Policy), "%q: %v", in, err)
	}
}

// TestCleanLength refuses, with validation, what no Linux file system holds: a name over
// NAME_MAX, a path of PATH_MAX or more (once cleaned); escapes are policy first.
func TestCleanLength(t *testing.T) {
	name := strings.Repeat("n", wspath.MaxNameBytes)
	for _, ok := range []string{name, "a/" + name, strings.Repeat("d/", (wspath.MaxPathBytes-2)/2) + "f", strings.Repeat("n/../", 2000) + "x"} {
		_, err := wspath.Clean(ok)
		assert.NoError(t, err, "%d bytes", len(ok))
	}
	for _, long := range []string{name + "n", "a/" + name + "n/b", strings.Repeat("d/", wspath.MaxPathBytes/2) + "f"} {
		_, err := wspath.Clean(long)
		assert.True(t, fault.IsKind(err, fault.Validation), "%d bytes: %v", len(long), err)
		assert.Less(t, len(err.Error()), 300, "the message shows the start of the path only")
	}
	_, err := wspath.Clean("../" + name + "n")
	assert.True(t, fault.IsKind(err, fault.Policy), "an escape is policy, whatever its length: %v", err)
}

// TestCleanEntry refuses the workspace folder itself, however it is written, with validation.
func TestCleanEntry(t *testing.T) {
	for _, root := range []string{"", ".", "./", "a/..", "a/../."} {
		_, err := wspath.CleanEntry(root)
		assert.True(t, fault.IsKind(err, fault.Validation), "%q: %v", root, err)
	}
	got, err := wspath.CleanEntry("a/./b/")
	require.NoError(t, err)
	assert.Equal(t, "a/b", got)
	for _, bad := range []string{"..", "/", "x\x00"} {
		_, err := wspath.CleanEntry(bad)
		assert.True(t, fault.IsKind(err, fault.Policy), "%q: %v", bad, err)
	}
}

func TestValidEnvName(t *testing.T) {
	for _, ok := range []string{"A", "_x", "PATH", "a1_B"} {
		assert.True(t, wspath.ValidEnvName(ok), ok)
	}
	for _, bad := range []string{"", "1A", "A-B", "A=B", "A B", "Ä", "A\x00"} {
		assert.False(t, wspath.ValidEnvName(bad), bad)
	}
}

// TestRootError classifies real os.Root failures, including the escape os.Root reports only
// by its text.
func TestRootError(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Symlink("/etc", filepath.Join(dir, "out")))
	require.NoError(t, os.Symlink("loop", filepath.Join(dir, "loop")))
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer root.Close()

	_, err = root.Open("out/passwd")
	assert.True(t, wspath.IsEscape(err), "os.Root's escape error changed: %v", err)
	assert.True(t, fault.IsKind(wspath.RootError("out/passwd", err), fault.Policy))
	_, err = root.Open("missing")
	assert.True(t, fault.IsKind(wspath.RootError("missing", err), fault.NotFound))
	_, err = root.Open("loop/x")
	assert.True(t, fault.IsKind(wspath.RootError("loop/x", err), fault.Conflict), "%v", err)
	assert.True(t, fault.IsKind(wspath.RootError("x", &fs.PathError{Op: "open", Path: "x", Err: syscall.ENAMETOOLONG}), fault.Validation))
	other := wspath.RootError("x", fmt.Errorf("boom: %w", syscall.EIO))
	assert.True(t, errors.Is(other, syscall.EIO))
	var fe *fault.Error
	assert.False(t, errors.As(other, &fe), "unclassified errors stay unclassified")
}
