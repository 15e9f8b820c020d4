package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/docker"
)

// gateway is one real gateway (gatewaytest) served over HTTP on 127.0.0.1: a real Postgres
// database, the development issuer mounted at /dev/oidc (verified through go-oidc like any
// issuer), local profiles "default" and "oneshot" in a temporary folder, and the console
// wired as `gateway dev` wires it.
type gateway struct {
	URL    string
	issuer *devissuer.Issuer
}

func startGateway(t *testing.T, more ...func(*config.Config)) *gateway {
	t.Helper()
	e := gatewaytest.Start(t, gatewaytest.Options{MaxConns: 10, Config: func(c *config.Config) {
		c.Sandbox.MaxFileBytes = 4 << 20
		for _, m := range more {
			m(c)
		}
	}})
	return &gateway{URL: e.URL, issuer: e.Issuer}
}

// call sends method path with a JSON body as the bearer of tok.
func (g *gateway) call(t *testing.T, method, path, tok, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, g.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// jsonField returns the string member name of a JSON object.
func jsonField(t *testing.T, body []byte, name string) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m), "%s", body)
	v, _ := m[name].(string)
	require.NotEmpty(t, v, "%s has no %s", body, name)
	return v
}

// dockerImage is the sandbox image for the docker-backed console test; without an engine or
// the image the test skips (under CI=true it fails).
func dockerImage(t *testing.T) string {
	t.Helper()
	img := os.Getenv("SANDGATE_DOCKER_TEST_IMAGE")
	if img == "" {
		img = "sandgate/sandbox-python:latest"
	}
	reason := ""
	if !docker.Available(t.Context(), "") {
		reason = "no Docker engine is reachable (run scripts/docker-setup.sh)"
	} else if out, err := exec.Command("docker", "image", "inspect", img).CombinedOutput(); err != nil {
		reason = "the sandbox image " + img + " is missing (images/sandbox/build.sh): " + strings.TrimSpace(string(out))
	}
	if reason != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and " + reason)
		}
		t.Skip(reason)
	}
	return img
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
