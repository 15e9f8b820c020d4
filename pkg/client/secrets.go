package client

import (
	"context"
	"net/http"
)

// Secrets (/v1/secrets; docs/semantics.md §15) are write-only: a value is set, never read back.

// PutSecret creates or replaces the caller's secret name with value, sent only to hosts
// (PUT /v1/secrets/{name}); the answer carries the secret's name, hosts and times, never its
// value.
func (c *Client) PutSecret(ctx context.Context, name string, value string, hosts []string, editors ...RequestEditorFn) (*Secret, error) {
	return want[Secret](http.StatusCreated, http.StatusOK)(c.Raw.PutSecret(ctx, name, PutSecretRequest{Value: value, Hosts: hosts}, editors...))
}

// Secrets lists the caller's secrets by name, never their values (GET /v1/secrets).
func (c *Client) Secrets(ctx context.Context, editors ...RequestEditorFn) ([]Secret, error) {
	l, err := want[SecretList](http.StatusOK)(c.Raw.ListSecrets(ctx, editors...))
	if err != nil {
		return nil, err
	}
	return l.Secrets, nil
}

// DeleteSecret deletes the caller's secret name (DELETE /v1/secrets/{name}); another
// principal's, or none, is a 404.
func (c *Client) DeleteSecret(ctx context.Context, name string, editors ...RequestEditorFn) error {
	return noContent(c.Raw.DeleteSecret(ctx, name, editors...))
}
