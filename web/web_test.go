package web_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/web"
)

func serve(h http.Handler, method, path string, hdr ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestHandlerServesPageAssetsAndConfig(t *testing.T) {
	h := web.Handler(web.Config{Issuer: "https://login.example.test/realms/x/", ClientID: "console"})

	page := serve(h, "GET", "/")
	require.Equal(t, 200, page.Code)
	require.Equal(t, "text/html; charset=utf-8", page.Header().Get("Content-Type"))
	require.Contains(t, page.Body.String(), `<script type="module" src="/console/app.js">`)
	csp := page.Header().Get("Content-Security-Policy")
	require.Contains(t, csp, "script-src 'self'")
	require.Contains(t, csp, "connect-src 'self' https://login.example.test;", "the issuer's origin is reachable for discovery and the token")
	require.Equal(t, "no-referrer", page.Header().Get("Referrer-Policy"))

	for _, name := range []string{"app.js", "auth.js", "api.js", "ui.js", "views.js", "session.js", "result.js", "keys.js", "secrets.js"} {
		js := serve(h, "GET", "/console/"+name)
		require.Equal(t, 200, js.Code, name)
		require.True(t, strings.HasPrefix(js.Header().Get("Content-Type"), "text/javascript"), "%s: ES modules need a JavaScript type, got %q", name, js.Header().Get("Content-Type"))
	}
	css := serve(h, "GET", "/console/style.css")
	require.Equal(t, 200, css.Code)
	require.True(t, strings.HasPrefix(css.Header().Get("Content-Type"), "text/css"))

	cfg := serve(h, "GET", "/console/config.json")
	require.Equal(t, 200, cfg.Code)
	require.Equal(t, "application/json", cfg.Header().Get("Content-Type"))
	var got map[string]any
	require.NoError(t, json.Unmarshal(cfg.Body.Bytes(), &got))
	require.Equal(t, map[string]any{"issuer": "https://login.example.test/realms/x", "client_id": "console", "scopes": []any{"openid", "profile", "email"}}, got)

	// Revalidation: a repeated request with the ETag answers 304.
	etag := page.Header().Get("ETag")
	require.NotEmpty(t, etag)
	require.Equal(t, http.StatusNotModified, serve(h, "GET", "/", "If-None-Match", etag).Code)

	require.Equal(t, 404, serve(h, "GET", "/console/index.html").Code, "the page is served at / only")
	require.Equal(t, 404, serve(h, "GET", "/console/nope.js").Code)
	require.Equal(t, 405, serve(h, "POST", "/").Code)
	head := serve(h, "HEAD", "/console/app.js")
	require.Equal(t, 200, head.Code)
	require.Empty(t, head.Body.String())
}

func TestHandlerWithoutSignInConfig(t *testing.T) {
	for _, cfg := range []web.Config{{}, {Issuer: "https://idp.example.test"}, {ClientID: "console"}} {
		rec := serve(web.Handler(cfg), "GET", "/console/config.json")
		require.Equal(t, 200, rec.Code)
		var got web.Config
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
		require.Empty(t, got.Issuer, "half a configuration is no configuration: the page says sign-in is not configured")
		require.Empty(t, got.ClientID)
	}
}

// TestRoutesWinOverConsole checks, on a real gateway, that mounting the console at "/" leaves
// every other route as it was.
func TestRoutesWinOverConsole(t *testing.T) {
	g := startGateway(t)
	cases := []struct {
		method, path string
		status       int
		ctype        string
	}{
		{"GET", "/", 200, "text/html"},
		{"HEAD", "/", 200, "text/html"},
		{"GET", "/console/app.js", 200, "text/javascript"},
		{"GET", "/console/config.json", 200, "application/json"},
		{"GET", "/healthz", 200, "application/json"},
		{"GET", "/openapi.yaml", 200, "application/yaml"},
		{"GET", "/openapi.json", 200, "application/json"},
		{"GET", "/docs/", 200, "text/html"},
		{"GET", "/dev/oidc/.well-known/openid-configuration", 200, "application/json"},
		{"GET", "/v1/me", 401, "application/problem+json"},
		{"GET", "/v1/profiles", 401, "application/problem+json"},
		{"GET", "/nope", 404, "application/problem+json"},
		{"GET", "/console/nope.js", 404, "text/plain"},
		{"POST", "/", 405, "application/problem+json"},
	}
	for _, c := range cases {
		resp, _ := g.get(t, c.method, c.path, "")
		require.Equal(t, c.status, resp.StatusCode, "%s %s", c.method, c.path)
		require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), c.ctype), "%s %s: Content-Type %q", c.method, c.path, resp.Header.Get("Content-Type"))
	}
	var cfg web.Config
	_, body := g.get(t, "GET", "/console/config.json", "")
	require.NoError(t, json.Unmarshal(body, &cfg))
	require.Equal(t, g.URL+"/dev/oidc", cfg.Issuer)
	require.Equal(t, "sandgate-console", cfg.ClientID)
}
