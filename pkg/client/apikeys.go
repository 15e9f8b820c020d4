package client

import (
	"context"
	"net/http"
)

// WithAPIKey sends an API key (sgk_…, made with CreateAPIKey by a signed-in caller) as the
// bearer credential of every request: the gateway takes it wherever it takes a token, as the
// principal that made it.
func WithAPIKey(key string) ClientOption { return WithToken(key) }

// CreateAPIKey makes an API key that authenticates as the caller (POST /v1/api-keys) and
// answers it with its Secret, which the gateway does not keep: store it now. The caller must
// be signed in (a request made with a key is refused with 403). req.TtlS is its lifetime in
// seconds (nil: the gateway's auth.api_keys.default_ttl); req.Profiles restricts it.
func (c *Client) CreateAPIKey(ctx context.Context, req CreateAPIKeyRequest, editors ...RequestEditorFn) (*CreatedAPIKey, error) {
	return want[CreatedAPIKey](http.StatusCreated)(c.Raw.CreateAPIKey(ctx, req, editors...))
}

// APIKeys lists one page of the caller's API keys, newest first, never their secrets
// (GET /v1/api-keys); params.All lists every principal's (administrators with a sign-in).
// params may be nil.
func (c *Client) APIKeys(ctx context.Context, params *ListAPIKeysParams, editors ...RequestEditorFn) (*APIKeyList, error) {
	return want[APIKeyList](http.StatusOK)(c.Raw.ListAPIKeys(ctx, params, editors...))
}

// APIKey is one API key by its id (GET /v1/api-keys/{id}); another principal's is a 404.
func (c *Client) APIKey(ctx context.Context, keyID string, editors ...RequestEditorFn) (*APIKey, error) {
	return want[APIKey](http.StatusOK)(c.Raw.GetAPIKey(ctx, keyID, editors...))
}

// RevokeAPIKey revokes an API key at once, on every replica (DELETE /v1/api-keys/{id}), and
// answers it with Status "revoked"; revoking a revoked key changes nothing.
func (c *Client) RevokeAPIKey(ctx context.Context, keyID string, editors ...RequestEditorFn) (*APIKey, error) {
	return want[APIKey](http.StatusOK)(c.Raw.RevokeAPIKey(ctx, keyID, editors...))
}
