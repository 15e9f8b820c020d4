package api_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/local"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// refusingDestroy is the local provider with a Destroy that fails while refuse is set, as an
// engine that does not answer.
type refusingDestroy struct {
	*local.Provider
	refuse *atomic.Bool
}

func (p refusingDestroy) Destroy(ctx context.Context, id string) error {
	if p.refuse.Load() {
		return fault.New(fault.Provision, "local_subprocess: the engine does not answer")
	}
	return p.Provider.Destroy(ctx, id)
}

// refusingRegistry serves local_subprocess profiles with a refusingDestroy provider.
func refusingRegistry(refuse *atomic.Bool) *providers.Registry {
	reg := providers.NewRegistry()
	b := local.Backend()
	b.Factory = func(ctx providers.BuildContext) (providers.Provider, error) {
		p, err := local.Factory(ctx)
		if err != nil {
			return nil, err
		}
		return refusingDestroy{Provider: p.(*local.Provider), refuse: refuse}, nil
	}
	reg.Add(b)
	return reg
}

// DELETE of a session whose sandbox the provider fails to remove answers 202: the session is
// kept, closed for new work (409) and listed as destroy_failed, with the provider's error;
// a repeated DELETE retries at once; the sweeper retries with backoff until the provider
// confirms, and the session is gone (issue 32 item 9).
func TestDeleteWhenTheProviderFails(t *testing.T) {
	t.Parallel()
	var refuse atomic.Bool
	clock := sandboxtest.NewClock(time.Now())
	e := newEnv(t, envOpts{now: clock.Now, registry: refusingRegistry(&refuse), config: func(c *config.Config) {
		c.Sandbox.Broker.LostAfter = config.Duration(time.Hour)
	}})
	tok := e.token("alice")
	sid := e.newSession(tok, "default")
	e.run(tok, sid, "echo kept > f.txt")
	sb := e.do(tok, "GET", "/v1/sessions/"+sid, nil).JSON(t)["sandbox_id"].(string)

	refuse.Store(true)
	r := e.do(tok, "DELETE", "/v1/sessions/"+sid, nil)
	require.Equal(t, 202, r.Status, "body: %s", r.Body)
	assert.Equal(t, "/v1/sessions/"+sid, r.Header.Get("Location"))
	m := r.JSON(t)
	assert.Equal(t, sid, m["session_id"])
	assert.Equal(t, false, m["destroyed"])
	assert.Equal(t, "destroy_failed", m["state"])
	assert.Contains(t, m["notice"], "the engine does not answer")

	got := e.do(tok, "GET", "/v1/sessions/"+sid, nil)
	require.Equal(t, 200, got.Status, "body: %s", got.Body)
	s := got.JSON(t)
	assert.Equal(t, "destroy_failed", s["state"])
	assert.Equal(t, "closed", s["status"])
	assert.Equal(t, false, s["default"])
	assert.Contains(t, s["destroy_error"], "the engine does not answer")
	assert.Equal(t, float64(1), s["destroy_attempts"])
	assert.NotEmpty(t, s["destroy_retry_at"])
	list := e.do(tok, "GET", "/v1/sessions?status=closed", nil).JSON(t)["sessions"].([]any)
	require.Len(t, list, 1, "listed, so its owner sees it")
	_, err := os.Stat(sb)
	require.NoError(t, err, "the sandbox is still there")

	tasks := len(e.do(tok, "GET", "/v1/tasks", nil).JSON(t)["tasks"].([]any))
	p := requireProblem(t, e.do(tok, "POST", "/v1/sessions/"+sid+"/commands", map[string]any{"command": "true"}), 409, "conflict")
	assert.Contains(t, p["detail"], "being destroyed")
	requireProblem(t, e.do(tok, "PUT", "/v1/sessions/"+sid+"/files/g.txt", []byte("x")), 409, "conflict")
	requireProblem(t, e.do(tok, "GET", "/v1/sessions/"+sid+"/files/f.txt", nil), 409, "conflict")
	assert.Len(t, e.do(tok, "GET", "/v1/tasks", nil).JSON(t)["tasks"].([]any), tasks, "the refused execution left no task")
	requireProblem(t, e.do(e.token("bob"), "GET", "/v1/sessions/"+sid, nil), 404, "not-found")

	r = e.do(tok, "DELETE", "/v1/sessions/"+sid, nil)
	require.Equal(t, 202, r.Status, "a repeated DELETE retries at once: body: %s", r.Body)
	assert.Equal(t, float64(2), e.do(tok, "GET", "/v1/sessions/"+sid, nil).JSON(t)["destroy_attempts"])

	// The sweeper retries once the backoff is over, and forgets the session when the
	// provider confirms.
	refuse.Store(false)
	e.svc.SweepNow(t.Context())
	require.Equal(t, 200, e.do(tok, "GET", "/v1/sessions/"+sid, nil).Status, "not due yet")
	clock.Advance(time.Minute)
	e.svc.SweepNow(t.Context())
	requireProblem(t, e.do(tok, "GET", "/v1/sessions/"+sid, nil), 404, "not-found")
	_, err = os.Stat(sb)
	require.ErrorIs(t, err, os.ErrNotExist, "the sandbox is removed")

	r = e.do(tok, "DELETE", "/v1/sessions/"+sid, nil)
	require.Equal(t, 200, r.Status, "idempotent: body: %s", r.Body)
	assert.Equal(t, true, r.JSON(t)["destroyed"])
}

// The default session whose destroy failed steps aside: the next use of `default` makes a
// new one, and DELETE of `default` reaches that new one.
func TestDeleteDefaultWhenTheProviderFails(t *testing.T) {
	t.Parallel()
	var refuse atomic.Bool
	e := newEnv(t, envOpts{registry: refusingRegistry(&refuse)})
	tok := e.token("alice")
	first := e.run(tok, "default", "true")["session_id"].(string)
	refuse.Store(true)
	r := e.do(tok, "DELETE", "/v1/sessions/default", nil)
	require.Equal(t, 202, r.Status, "body: %s", r.Body)
	assert.Equal(t, first, r.JSON(t)["session_id"])
	refuse.Store(false)
	second := e.run(tok, "default", "true")["session_id"].(string)
	assert.NotEqual(t, first, second)
	r = e.do(tok, "DELETE", "/v1/sessions/default", nil)
	require.Equal(t, 200, r.Status, "body: %s", r.Body)
	assert.Equal(t, second, r.JSON(t)["session_id"])
	assert.Equal(t, "destroy_failed", e.do(tok, "GET", "/v1/sessions/"+first, nil).JSON(t)["state"], "the first waits for its retry")
}
