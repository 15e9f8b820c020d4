package local_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// A local sandbox has no egress proxy to keep a secret's value out of it: a policy with
// secrets is refused on create, attach and restore (fail closed), naming the secrets.
func TestSecretsRefused(t *testing.T) {
	t.Parallel()
	p := newProvider(t)
	pol := providers.Policy{Secrets: []providers.SecretBinding{{Name: "openai", EnvName: "SANDGATE_SECRET_OPENAI", Placeholder: "sgs_x", Value: []byte("v"), Hosts: []string{"api.openai.com"}}}}
	_, err := p.Create(t.Context(), providers.Principal{}, pol)
	require.Error(t, err)
	assert.Equal(t, fault.Policy, fault.KindOf(err))
	assert.Contains(t, err.Error(), "openai")
	assert.NotContains(t, err.Error(), "sgs_x")

	sb, err := p.Create(t.Context(), providers.Principal{}, providers.Policy{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Destroy(t.Context(), sb.ID()) })
	_, err = p.Attach(t.Context(), sb.ID(), providers.Principal{}, pol)
	assert.Equal(t, fault.Policy, fault.KindOf(err))
	_, err = p.Restore(t.Context(), "any", providers.Principal{}, pol)
	assert.Equal(t, fault.Policy, fault.KindOf(err))
}
