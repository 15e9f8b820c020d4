package web_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
)

// gateway is one real gateway (gatewaytest) served over HTTP on 127.0.0.1: a real Postgres
// database, the development issuer mounted at /dev/oidc (verified through go-oidc like any
// issuer), local profiles "default" and "oneshot" in a temporary folder, and the console
// wired as `gateway dev` wires it.
type gateway struct {
	URL    string
	issuer *devissuer.Issuer
}

func startGateway(t *testing.T) *gateway {
	t.Helper()
	e := gatewaytest.Start(t, gatewaytest.Options{MaxConns: 10, Config: func(c *config.Config) {
		c.Sandbox.MaxFileBytes = 4 << 20
	}})
	return &gateway{URL: e.URL, issuer: e.Issuer}
}

// token mints a dev token for sub, for checks made beside the browser.
func (g *gateway) token(t *testing.T, sub string, groups ...string) string {
	t.Helper()
	tok, err := g.issuer.Mint(devissuer.Claims{Subject: sub, Groups: groups})
	require.NoError(t, err)
	return tok
}

// get fetches path with an optional bearer token.
func (g *gateway) get(t *testing.T, method, path, tok string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, g.URL+path, nil)
	require.NoError(t, err)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}
