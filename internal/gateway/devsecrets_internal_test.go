package gateway

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/sandbox/secret"
)

// A development gateway's secrets key is made once, private to its user, and read again by
// the next run, so that secrets set in one run open in the next.
func TestDevSecretsKey(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "data", devSecretsKeyFile)
	first, err := devSecretsKey(path)
	require.NoError(t, err)
	ring, err := secret.ParseKeys([]string{first})
	require.NoError(t, err)
	require.Equal(t, "dev", ring.Primary())
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	again, err := devSecretsKey(path)
	require.NoError(t, err)
	require.Equal(t, first, again)
}
