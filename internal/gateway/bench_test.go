package gateway_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// The gateway's own cost per request, for profiling (go test -bench . -cpuprofile): a real
// gateway (Postgres, the development issuer, the local provider) driven over loopback HTTP
// by a client in the same process. The bench/ harness measures the gateway as a separate
// process; these are the quick loop for finding where its time goes.

func benchEnv(b *testing.B) (*gatewaytest.Env, string, string) { return benchEnvOn(b, "default") }

// benchEnvOn starts a gateway with profiles default (local) and docker (the test image,
// never pulled) and makes a session of profile.
func benchEnvOn(b *testing.B, profile string) (*gatewaytest.Env, string, string) {
	e := gatewaytest.Start(b, gatewaytest.Options{Config: func(c *config.Config) {
		c.Sandbox.Quotas = config.Quotas{Sessions: -1, ConcurrentExecutions: -1, RequestsPerSecond: -1, RetainedOutputBytes: -1, OpenRequests: -1}
		if profile == "docker" {
			c.Sandbox.Profiles = map[string]config.Profile{
				"default": {Type: local.TypeName, Blocks: config.Blocks{local.TypeName: &local.Block{Workdir: b.TempDir()}}},
				"docker":  {Type: docker.TypeName, Blocks: config.Blocks{docker.TypeName: &docker.Block{Image: "sandgate/sandbox-python:latest", Pull: docker.PullNever}}},
			}
		}
	}})
	tok := e.Token("bench")
	st, _, body := e.Do("POST", "/v1/sessions", tok, strings.NewReader(`{"profile":"`+profile+`"}`), map[string]string{"Content-Type": "application/json"})
	require.Equal(b, http.StatusCreated, st, "%s", body)
	id := between(string(body), `"id":"`, `"`)
	require.NotEmpty(b, id, "%s", body)
	return e, tok, id
}

func between(s, start, end string) string {
	_, after, ok := strings.Cut(s, start)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(after, end)
	return v
}

// request sends one request with a kept-alive client and fails b on a status other than want.
func request(b *testing.B, c *http.Client, method, url, tok string, body []byte, want int) {
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		b.Error(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != want {
		b.Errorf("%s %s: status %d", method, url, resp.StatusCode)
	}
}

func BenchmarkGetSession(b *testing.B) {
	e, tok, id := benchEnv(b)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.SetParallelism(8) // 16 clients on 2 CPUs
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			request(b, c, "GET", e.URL+"/v1/sessions/"+id, tok, nil, http.StatusOK)
		}
	})
}

func BenchmarkExecTrue(b *testing.B) { benchExecTrue(b, "default") }

// BenchmarkExecTrueDocker needs the engine and the test image (scripts/docker-setup.sh); the
// session is destroyed at the end.
func BenchmarkExecTrueDocker(b *testing.B) { benchExecTrue(b, "docker") }

func benchExecTrue(b *testing.B, profile string) {
	if profile == "docker" && !docker.Available(b.Context(), "") {
		b.Skip("no Docker engine reachable")
	}
	e, tok, id := benchEnvOn(b, profile)
	defer e.Do("DELETE", "/v1/sessions/"+id, tok, nil, nil)
	c := &http.Client{}
	body := []byte(`{"command":"true"}`)
	request(b, c, "POST", e.URL+"/v1/sessions/"+id+"/commands", tok, body, http.StatusOK)
	b.ResetTimer()
	for range b.N {
		request(b, c, "POST", e.URL+"/v1/sessions/"+id+"/commands", tok, body, http.StatusOK)
	}
}
