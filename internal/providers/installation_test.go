package providers_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

func TestInstallationIDs(t *testing.T) {
	a, b := providers.NewInstallationID(), providers.NewInstallationID()
	assert.True(t, providers.ValidInstallationID(a), a)
	assert.NotEqual(t, a, b)
	require.NoError(t, providers.CheckInstallationID("docker", a))
	for _, bad := range []string{"", "0123456789ABCDEF", "0123456789abcde", "0123456789abcdef0", "../../etc/passwd", "0123456789abcdeg"} {
		err := providers.CheckInstallationID("docker", bad)
		assert.True(t, fault.IsKind(err, fault.Config), "%q: %v", bad, err)
	}
}
