package api_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One principal's many long executions do not stall another principal: 70 `sleep` runs by
// one user in 70 sessions (more than the query pool has connections, and than the 64 lock
// connections executions used to share) leave another user's `echo` in their own session
// answering within a second.
func TestOnePrincipalDoesNotStallAnother(t *testing.T) {
	t.Parallel()
	// The quotas would refuse most of the flood (TestQuotas); here the locks are tested.
	e := newEnv(t, envOpts{config: func(c *config.Config) {
		c.Sandbox.Quotas.ConcurrentExecutions = -1
		c.Sandbox.Quotas.RequestsPerSecond = -1
		c.Sandbox.Quotas.OpenRequests = -1 // 70 requests waiting at once
	}})
	busy, other := e.token("busy"), e.token("other")
	mine := e.newSession(other, "default")
	sessions := make([]string, 70)
	for i := range sessions {
		sessions[i] = e.newSession(busy, "default")
	}
	var wg sync.WaitGroup
	for _, id := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.do(busy, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "sleep 6"})
			assert.Equal(t, 200, r.Status, "%s", r.Body)
		}()
	}
	// Wait until the 70 are running.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := e.do(busy, "GET", "/v1/tasks?status=running&limit=100", nil)
		require.Equal(t, 200, r.Status, "%s", r.Body)
		if n := len(r.JSON(t)["tasks"].([]any)); n >= len(sessions) {
			break
		}
		require.True(t, time.Now().Before(deadline), "the 70 executions did not all start")
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	r := e.do(other, "POST", "/v1/sessions/"+mine+"/commands", map[string]any{"command": "echo hello"})
	took := time.Since(start)
	require.Equal(t, 200, r.Status, "%s", r.Body)
	assert.Equal(t, "hello\n", r.JSON(t)["stdout"])
	assert.Less(t, took, time.Second, "another principal's echo waited %s behind 70 sleeps", took)
	wg.Wait()
}

// Losing a group revokes over REST too: 403 policy on every use of the session, while the
// session can still be destroyed.
func TestLosingAGroupRevokesItsSessions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	member, former := e.token("bob", "ml"), e.token("bob")
	id := e.newSession(member, "restricted")
	base := "/v1/sessions/" + id
	require.Equal(t, 200, e.do(member, "POST", base+"/commands", map[string]any{"command": "echo in > kept.txt"}).Status)

	for _, r := range []struct {
		method, path string
		body         any
	}{
		{"GET", base, nil},
		{"POST", base + "/commands", map[string]any{"command": "echo still"}},
		{"POST", base + "/code", map[string]any{"code": "print(1)"}},
		{"GET", base + "/files/kept.txt", nil},
		{"PUT", base + "/files/new.txt", []byte("x")},
		{"GET", base + "/files?dir=.", nil},
	} {
		p := requireProblem(t, e.do(former, r.method, r.path, r.body), 403, "policy")
		assert.Contains(t, p["detail"], "restricted to members of [ml]", r.method+" "+r.path)
	}
	// Results of the session's tasks too.
	task := e.do(member, "POST", base+"/commands", map[string]any{"command": "echo secret-result", "wait_s": 0}).JSON(t)["id"].(string)
	e.waitTask(member, task)
	p := requireProblem(t, e.do(former, "GET", "/v1/tasks/"+task, nil), 403, "policy")
	assert.NotContains(t, p["detail"], "secret-result")
	require.Equal(t, 200, e.do(former, "DELETE", base, nil).Status, "destroying stays possible")
	requireProblem(t, e.do(member, "GET", base, nil), 404, "not-found")
}

// A deeply nested JSON body is refused before validation (it used to cost seconds of CPU);
// nesting within the bound is validated as usual, and strings may hold any brackets.
func TestDeepJSONIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	nested := func(n int) []byte {
		return []byte(`{"command":"true","env":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`)
	}
	post := func(body []byte) reply {
		return e.send(tok, "POST", "/v1/sessions/default/commands", "application/json", bytes.NewReader(body), int64(len(body)), nil)
	}
	p := requireProblem(t, post(nested(10000)), 400, "validation")
	assert.Contains(t, p["detail"], "more than 64 levels")
	p = requireProblem(t, post(nested(20)), 400, "validation")
	assert.NotContains(t, p["detail"], "levels", "within the bound: the schema speaks")
	r := post([]byte(`{"command":"echo '` + strings.Repeat("[{", 200) + `'"}`))
	require.Equal(t, 200, r.Status, "%s", r.Body)
}

// Per-principal quotas: over sandbox.quotas a request answers 429 problem quota with
// Retry-After and the limit named; GET /v1/me shows usage and limits; admins are exempt;
// other principals are unaffected.
func TestQuotas(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{config: func(c *config.Config) {
		c.Sandbox.Quotas.Sessions = 2
		c.Sandbox.Quotas.ConcurrentExecutions = 2
	}})
	alice, bob, admin := e.token("alice"), e.token("bob"), e.token("root", "admins")
	e.newSession(alice, "default")
	e.newSession(alice, "default")
	r := e.do(alice, "POST", "/v1/sessions", map[string]any{"profile": "default"})
	p := requireProblem(t, r, 429, "quota")
	assert.Contains(t, p["detail"], "sandbox.quotas.sessions")
	assert.Equal(t, "60", r.Header.Get("Retry-After"))
	e.newSession(bob, "default") // another principal is unaffected
	for range 3 {
		e.newSession(admin, "default") // exempt
	}

	// Two long executions fill alice's execution quota; a third is refused at once.
	id := e.newSession(bob, "default")
	for range 2 {
		r := e.do(alice, "POST", "/v1/sessions/default/commands", map[string]any{"command": "sleep 30", "wait_s": 0})
		require.Equal(t, 202, r.Status, "%s", r.Body)
	}
	r = e.do(alice, "POST", "/v1/sessions/default/commands", map[string]any{"command": "echo refused"})
	p = requireProblem(t, r, 429, "quota")
	assert.Contains(t, p["detail"], "sandbox.quotas.concurrent_executions")
	assert.Equal(t, "5", r.Header.Get("Retry-After"))
	r = e.do(bob, "POST", "/v1/sessions/"+id+"/commands", map[string]any{"command": "echo fine"})
	require.Equal(t, 200, r.Status, "%s", r.Body)

	me := e.do(alice, "GET", "/v1/me", nil).JSON(t)["quotas"].(map[string]any)
	assert.Equal(t, map[string]any{"used": 3.0, "limit": 2.0}, me["sessions"], "two made plus the default session")
	assert.Equal(t, map[string]any{"used": 2.0, "limit": 2.0}, me["concurrent_executions"])
	me = e.do(admin, "GET", "/v1/me", nil).JSON(t)["quotas"].(map[string]any)
	assert.EqualValues(t, -1, me["sessions"].(map[string]any)["limit"])
}

// An environment the OS cannot pass is a 400 validation naming the variable, not a 502.
func TestOversizedEnvironmentIsAValidationError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	p := requireProblem(t, e.do(tok, "POST", "/v1/sessions/default/commands", map[string]any{"command": "true", "env": map[string]string{"BIG": strings.Repeat("x", 200<<10)}}), 400, "validation")
	assert.Contains(t, p["detail"], "BIG")
}

// An unknown profile's error names only the profiles the caller may use.
func TestUnknownProfileHidesRestrictedProfiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	p := requireProblem(t, e.do(e.token("alice"), "POST", "/v1/sessions", map[string]any{"profile": "nope"}), 400, "config")
	assert.Contains(t, p["detail"], "default")
	assert.NotContains(t, p["detail"], "restricted")
	p = requireProblem(t, e.do(e.token("bob", "ml"), "POST", "/v1/sessions", map[string]any{"profile": "nope"}), 400, "config")
	assert.Contains(t, p["detail"], "restricted")
}

// The per-principal request rate: every answer says what is left (RateLimit-* headers);
// past the burst a principal gets 429 quota with Retry-After, while another principal is
// unaffected.
func TestRequestRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{config: func(c *config.Config) {
		c.Sandbox.Quotas.RequestsPerSecond = 1
		c.Sandbox.Quotas.RequestsBurst = 5
	}})
	alice, bob := e.token("alice"), e.token("bob")
	r := e.do(alice, "GET", "/v1/me", nil)
	require.Equal(t, 200, r.Status)
	assert.Equal(t, "5", r.Header.Get("RateLimit-Limit"))
	assert.Equal(t, "4", r.Header.Get("RateLimit-Remaining"))
	var refused reply
	for range 10 {
		if r := e.do(alice, "GET", "/v1/profiles", nil); r.Status == 429 {
			refused = r
			break
		}
	}
	p := requireProblem(t, refused, 429, "quota")
	assert.Contains(t, p["detail"], "requests_per_second")
	assert.NotEmpty(t, refused.Header.Get("Retry-After"))
	assert.Equal(t, "0", refused.Header.Get("RateLimit-Remaining"))
	require.Equal(t, 200, e.do(bob, "GET", "/v1/me", nil).Status, "another principal has its own bucket")
	require.Equal(t, 200, e.do(e.token("root", "admins"), "GET", "/v1/me", nil).Status)
}
