package wspath_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
