package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
)

// metricsShape reads e's /metrics and returns its series (each sample line without its
// value) and the size of the output without the values: what grows with new label values,
// not with counts.
func metricsShape(t *testing.T, e *gatewaytest.Env) (lines []string, size int) {
	t.Helper()
	resp, err := http.Get(e.MetricsURL())
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			size += len(line) + 1
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, "a sample line: %q", line)
		lines = append(lines, line[:i])
		size += i + 1
	}
	require.NoError(t, sc.Err())
	slices.Sort(lines)
	return lines, size
}

func randomText(rnd *rand.Rand, alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rnd.IntN(len(alphabet))]
	}
	return string(b)
}

// Issue 33 ("metrics cardinality without a token"): every distinct HTTP method name became a
// label value, and 20 requests with long made-up methods grew /metrics from 438 KB to 28 MB
// for good. After one request of each kind, 1,000 more with random methods, paths, ids,
// ports, query strings and MCP tool names — with a token, without one — leave /metrics
// with the same series and the same size (values aside).
func TestMetricsStayTheSameSizeWhateverCallersSend(t *testing.T) {
	t.Parallel()
	e := gatewaytest.Start(t, gatewaytest.Options{Config: func(c *config.Config) {
		c.Server.MetricsAddr = "127.0.0.1:0"
		c.Sandbox.Quotas.RequestsPerSecond = -1 // 1,000 requests at once are not the point here
	}})
	tok := e.Token("alice")
	rnd := rand.New(rand.NewPCG(33, uint64(time.Now().UnixNano())))
	const (
		tchar = "!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		seg   = "abcdefghijklmnopqrstuvwxyz0123456789-_~" // no '.': "." and ".." are path steps
		hex   = "0123456789abcdef"
	)
	method := func() string { return "X" + randomText(rnd, tchar, 1+rnd.IntN(300)) }
	segment := func() string { return randomText(rnd, seg, 1+rnd.IntN(60)) }
	send := func(method, path, tok string, body io.Reader, header map[string]string) int {
		t.Helper()
		status, _, _ := e.Do(method, path, tok, body, header)
		return status
	}
	mcpHeader := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

	// An MCP session to call made-up tools on.
	req, err := http.NewRequest("POST", e.URL+"/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	require.NoError(t, err)
	for k, v := range mcpHeader {
		req.Header.Set(k, v)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	session := resp.Header.Get("Mcp-Session-Id")
	require.NotEmpty(t, session)
	withSession := map[string]string{"Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-06-18"}
	for k, v := range mcpHeader {
		withSession[k] = v
	}
	require.Equal(t, http.StatusAccepted, send("POST", "/mcp", tok, strings.NewReader(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), withSession))

	kinds := []func(){
		func() { send(method(), "/"+segment(), tok, nil, nil) },
		func() { send(method(), "/v1/tasks/"+randomText(rnd, hex, 32), "", nil, nil) },
		func() { send(method(), "/mcp", tok, nil, nil) },
		func() { send("GET", "/r-"+segment()+"/"+segment(), "", nil, nil) },
		func() { send("GET", "/v1/tasks/"+randomText(rnd, hex, 32), tok, nil, nil) },
		func() { send("GET", "/v1/tasks/"+randomText(rnd, hex, 32), "", nil, nil) },
		func() {
			send("GET", "/v1/me?"+url.Values{segment(): {segment()}}.Encode(), tok, nil, map[string]string{"X-" + segment(): segment()})
		},
		func() {
			send("GET", "/v1/sessions/"+randomText(rnd, hex, 32)+"/files/"+segment()+"/"+segment(), tok, nil, nil)
		},
		func() {
			send("PATCH", fmt.Sprintf("/v1/sessions/%s/ports/%d/%s", randomText(rnd, hex, 32), 1+rnd.IntN(65535), segment()), tok, nil, nil)
		},
		func() {
			call := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{}}}`, 2+rnd.IntN(1<<30), segment())
			send("POST", "/mcp", tok, strings.NewReader(call), withSession)
		},
	}
	for _, kind := range kinds {
		kind()
	}
	before, beforeSize := metricsShape(t, e)
	for range 1000 {
		kinds[rnd.IntN(len(kinds))]()
	}
	after, afterSize := metricsShape(t, e)
	require.Equal(t, before, after, "no series came or went")
	require.Equal(t, beforeSize, afterSize, "/metrics is the same size, values aside")

	var counts []string
	for _, l := range after {
		if strings.HasPrefix(l, "sandgate_http_request_duration_seconds_count") {
			counts = append(counts, l)
		}
	}
	assert.Contains(t, counts, `sandgate_http_request_duration_seconds_count{code="405",method="other",route="unmatched"}`)
	assert.Contains(t, counts, `sandgate_http_request_duration_seconds_count{code="404",method="GET",route="/v1/tasks/{task_id}"}`)
	assert.Contains(t, counts, `sandgate_http_request_duration_seconds_count{code="404",method="PATCH",route="/v1/sessions/{session_id}/ports/{port}/*"}`)
	assert.LessOrEqual(t, len(counts), 20, "a handful of series: %v", counts)
}
