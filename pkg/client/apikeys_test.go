package client_test

import (
	"crypto/rand"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/pkg/client"
)

// TestAPIKeys: a signed-in client makes a key, a client with only that key works as the
// same principal and cannot make keys, the key is listed without its secret, and once
// revoked it is refused.
func TestAPIKeys(t *testing.T) {
	ctx := t.Context()
	// A subject of this run's own: the package's gateway outlives the test (and -count runs).
	sub := "kim-" + rand.Text()[:8]
	c := newClient(t, sub)
	ttl := 3600
	k, err := c.CreateAPIKey(ctx, client.CreateAPIKeyRequest{Name: "client-test", TtlS: &ttl, Profiles: &[]string{"default"}})
	require.NoError(t, err)
	require.Regexp(t, `^sgk_[0-9A-Za-z]{49}$`, k.Secret)
	assert.Equal(t, client.CreatedAPIKeyStatus("active"), k.Status)
	assert.Equal(t, []string{"default"}, *k.Profiles)

	hc := &http.Client{Transport: checked{t, gatewaytest.LoadContract(t)}}
	kc, err := client.New(shared.URL, client.WithAPIKey(k.Secret), client.WithHTTPClient(hc))
	require.NoError(t, err)
	me, err := kc.Me(ctx)
	require.NoError(t, err)
	assert.Equal(t, sub, me.Subject)
	require.NotNil(t, me.ApiKey)
	assert.Equal(t, k.Id, me.ApiKey.Id)
	_, err = kc.CreateAPIKey(ctx, client.CreateAPIKeyRequest{Name: "successor"})
	assert.True(t, client.IsKind(err, client.KindForbidden), "a key makes no keys: %v", err)

	list, err := c.APIKeys(ctx, nil)
	require.NoError(t, err)
	require.Len(t, list.ApiKeys, 1)
	assert.Equal(t, k.Prefix, list.ApiKeys[0].Prefix)
	one, err := kc.APIKey(ctx, k.Id)
	require.NoError(t, err)
	assert.Equal(t, "client-test", one.Name)

	_, err = newClient(t, "lou").APIKey(ctx, k.Id)
	assert.True(t, client.IsKind(err, client.KindNotFound), "another principal's key: %v", err)

	r, err := c.RevokeAPIKey(ctx, k.Id)
	require.NoError(t, err)
	assert.Equal(t, client.APIKeyStatus("revoked"), r.Status)
	_, err = kc.Me(ctx)
	var e *client.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, http.StatusUnauthorized, e.Status)
	assert.Contains(t, e.Detail, "was revoked at")
}
