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
)

// The gateway's own cost per request, for profiling (go test -bench . -cpuprofile): a real
// gateway (Postgres, the development issuer, the local provider) driven over loopback HTTP
// by a client in the same process. The bench/ harness measures the gateway as a separate
// process; these are the quick loop for finding where its time goes.

func benchEnv(b *testing.B) (*gatewaytest.Env, string, string) {
	e := gatewaytest.Start(b, gatewaytest.Options{Config: func(c *config.Config) {
		c.Sandbox.Quotas = config.Quotas{Sessions: -1, ConcurrentExecutions: -1, RequestsPerSecond: -1}
	}})
	tok := e.Token("bench")
	st, _, body := e.Do("POST", "/v1/sessions", tok, strings.NewReader(`{"profile":"default"}`), map[string]string{"Content-Type": "application/json"})
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

func BenchmarkExecTrue(b *testing.B) {
	e, tok, id := benchEnv(b)
	c := &http.Client{}
	body := []byte(`{"command":"true"}`)
	request(b, c, "POST", e.URL+"/v1/sessions/"+id+"/commands", tok, body, http.StatusOK)
	b.ResetTimer()
	for range b.N {
		request(b, c, "POST", e.URL+"/v1/sessions/"+id+"/commands", tok, body, http.StatusOK)
	}
}
