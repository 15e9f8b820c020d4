//go:build unix

package local_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// The local_subprocess block: optional, python defaulted, and no stateful profile with the
// queue broker (a context lives in one process).
func TestBlock(t *testing.T) {
	require.True(t, local.Backend().BlockOptional, "a local_subprocess profile needs no block")
	b := local.Block{Workdir: "/srv/sandboxes"}
	b.ApplyDefaults()
	assert.Equal(t, local.Options{Workdir: "/srv/sandboxes", Python: local.DefaultPython}, b.Options(providers.Profile{}))
	assert.Empty(t, b.Validate(providers.Profile{Stateful: true}))
	assert.Empty(t, b.Validate(providers.Profile{Queued: true}))
	ps := b.Validate(providers.Profile{Stateful: true, Queued: true})
	require.Len(t, ps, 1)
	assert.Equal(t, "stateful", ps[0].Key)
	assert.Contains(t, ps[0].Msg, "queue")
}
