package sandbox_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// Destroying a session whose sandbox the provider fails to remove keeps the session — no
// sandbox is left that no session points to — closed for new work and listed, and the
// sweeper retries the removal with backoff until the provider confirms it, then forgets the
// session (issue 32 item 9).
func TestFailedDestroyKeepsTheSessionUntilTheSandboxIsGone(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "default")
	admin := b.Principal(t, "root")
	admin.Admin = true
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Name: "work"})
	require.NoError(t, err)
	b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "print(1)"})
	sandboxID := prov.Live()[0]

	prov.FailDestroy(2, fault.New(fault.Provision, "the engine does not answer"))
	d, err := b.Service.DestroySession(b.ctx, b.alice, sess.ID, "")
	require.NoError(t, err)
	assert.True(t, d.Pending)
	assert.Equal(t, sess.ID, d.SessionID)
	assert.Contains(t, d.Notice, "the engine does not answer")
	assert.Contains(t, d.Notice, "retries")

	got, err := b.Service.GetSession(b.ctx, b.alice, sess.ID, "")
	require.NoError(t, err, "its owner still sees it")
	assert.Equal(t, sandbox.StateDestroyFailed, got.State)
	assert.Equal(t, "closed", got.Status)
	assert.Equal(t, 1, got.DestroyAttempts)
	assert.Contains(t, got.DestroyError, "the engine does not answer")
	assert.True(t, sandboxtest.T0.Add(30*time.Second).Equal(got.DestroyRetryAt), "retried 30 s after: %v", got.DestroyRetryAt)
	listed, _, err := b.Service.ListSessions(b.ctx, b.alice, sandbox.ListFilter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, listed, 1)
	assert.Equal(t, sandbox.StateDestroyFailed, listed[0].State)
	assert.Equal(t, []string{sandboxID}, prov.Live(), "the sandbox is still there, and a session points to it")

	// No new work: executions, files, contexts, pause.
	_, err = b.Service.Execute(b.ctx, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "print(2)"})
	require.Error(t, err)
	assert.Equal(t, fault.Conflict, fault.KindOf(err))
	assert.Contains(t, err.Error(), "being destroyed")
	assert.Contains(t, err.Error(), "the engine does not answer")
	_, err = b.Service.WriteFile(b.ctx, b.alice, sess.ID, "", "a.txt", strings.NewReader("x"), 1)
	assert.Equal(t, fault.Conflict, fault.KindOf(err))
	_, _, err = b.Service.PauseSession(b.ctx, b.alice, sess.ID, "")
	assert.Equal(t, fault.Conflict, fault.KindOf(err))
	tasks, _, err := b.Service.ListTasks(b.ctx, b.alice, sandbox.TaskFilter{Limit: 10})
	require.NoError(t, err)
	assert.Len(t, tasks, 1, "the refused execution left no task")

	events, _, err := b.Service.Audit(b.ctx, admin, sandbox.AuditQuery{Limit: 1})
	require.NoError(t, err)
	require.Len(t, events, 1)
	assert.Equal(t, "session_destroy", events[0].Kind)
	assert.Equal(t, "failed", events[0].Status)
	assert.Equal(t, string(fault.Provision), events[0].ErrorType)

	// The sweeper retries when due, backing off, until the provider confirms.
	b.Service.SweepNow(b.ctx)
	assert.Len(t, prov.Destroyed(), 1, "not due yet")
	b.Clock.Advance(30 * time.Second)
	b.Service.SweepNow(b.ctx)
	assert.Len(t, prov.Destroyed(), 2)
	got, err = b.Service.GetSession(b.ctx, b.alice, sess.ID, "")
	require.NoError(t, err)
	assert.Equal(t, 2, got.DestroyAttempts)
	assert.True(t, sandboxtest.T0.Add(90*time.Second).Equal(got.DestroyRetryAt), "twice as long after the second failure: %v", got.DestroyRetryAt)
	b.Clock.Advance(59 * time.Second)
	b.Service.SweepNow(b.ctx)
	assert.Len(t, prov.Destroyed(), 2, "backing off")
	b.Clock.Advance(time.Second)
	b.Service.SweepNow(b.ctx)
	assert.Empty(t, prov.Live(), "removed at last")
	_, err = b.Service.GetSession(b.ctx, b.alice, sess.ID, "")
	assert.Equal(t, fault.NotFound, fault.KindOf(err), "and the session forgotten")
}

// Destroying a closed session again retries at once (idempotent DELETE); a sandbox the
// provider reports gone counts as removed.
func TestRepeatedDestroyRetriesAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "default")
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{})
	require.NoError(t, err)
	b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "print(1)"})

	prov.FailDestroy(1, fault.New(fault.Unavailable, "engine restarting"))
	d, err := b.Service.DestroySession(b.ctx, b.alice, sess.ID, "")
	require.NoError(t, err)
	require.True(t, d.Pending)
	_, err = b.Service.DestroySession(b.ctx, b.bob, sess.ID, "")
	require.NoError(t, err, "another principal's: unknown, and left alone")
	d, err = b.Service.DestroySession(b.ctx, b.alice, sess.ID, "")
	require.NoError(t, err)
	assert.Equal(t, sandbox.Destroyed{SessionID: sess.ID}, d)
	assert.Empty(t, prov.Live())
	d, err = b.Service.DestroySession(b.ctx, b.alice, sess.ID, "")
	require.NoError(t, err)
	assert.Equal(t, sandbox.Destroyed{SessionID: sess.ID}, d, "and again: unknown now")

	other, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{})
	require.NoError(t, err)
	b.exec(t, b.alice, sandbox.ExecInput{SessionID: other.ID, Code: "print(1)"})
	prov.FailDestroy(1, fault.New(fault.Gone, "no such container"))
	d, err = b.Service.DestroySession(b.ctx, b.alice, other.ID, "")
	require.NoError(t, err)
	assert.False(t, d.Pending, "gone counts as removed")
	_, err = b.Service.GetSession(b.ctx, b.alice, other.ID, "")
	assert.Equal(t, fault.NotFound, fault.KindOf(err))
}

// A default session whose destroy failed is no longer the default: the next use of
// "default" makes a new one beside it, while the closed one waits for its removal.
func TestFailedDestroyOfTheDefaultSession(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "default")
	first := b.exec(t, b.alice, sandbox.ExecInput{SessionID: sandbox.DefaultSessionID, Code: "print(1)"})
	prov.FailDestroy(1, fault.New(fault.Provision, "busy"))
	d, err := b.Service.DestroySession(b.ctx, b.alice, sandbox.DefaultSessionID, "")
	require.NoError(t, err)
	require.True(t, d.Pending)
	require.Equal(t, first.SessionID, d.SessionID)

	next := b.exec(t, b.alice, sandbox.ExecInput{SessionID: sandbox.DefaultSessionID, Code: "print(2)"})
	assert.NotEqual(t, first.SessionID, next.SessionID)
	listed, _, err := b.Service.ListSessions(b.ctx, b.alice, sandbox.ListFilter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, listed, 2)
	states := map[string]string{}
	for _, s := range listed {
		states[s.ID] = s.State
		if s.ID == first.SessionID {
			assert.False(t, s.IsDefault, "no longer the default")
		} else {
			assert.True(t, s.IsDefault)
		}
	}
	assert.Equal(t, map[string]string{first.SessionID: sandbox.StateDestroyFailed, next.SessionID: sandbox.StateRunning}, states)
}

// executions counts the executions an observer was told of.
type executions struct {
	mu sync.Mutex
	n  map[string]int // status → count
}

func (o *executions) ExecutionFinished(_, _, status string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[status]++
}

func (o *executions) ProviderError(string, string, string, string) {}

func (o *executions) counts() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]int{}
	for k, v := range o.n {
		out[k] = v
	}
	return out
}

// taskCount is how many tasks p has.
func (b *bundle) taskCount(t *testing.T, p principal.Principal) int {
	t.Helper()
	tasks, _, err := b.Service.ListTasks(b.ctx, p, sandbox.TaskFilter{Limit: 100})
	require.NoError(t, err)
	return len(tasks)
}

// An execution refused before it starts — its session paused, over the contexts quota — is
// no execution: no task stays, no audit event, no execution metric; the caller gets the
// refusal. One its caller already holds as a task (promoted) fails with the refusal instead,
// and still counts in no metric.
func TestRefusedExecutionsLeaveNoTask(t *testing.T) {
	t.Parallel()
	lax := sandboxtest.Profile("default", sandbox.ScopePerSession, nil)
	lax.Policy.Strict = false // held on pause: the fake provider cannot freeze
	caps := sandboxtest.DefaultCapabilities()
	caps.Stateful, caps.Background, caps.Shell = true, true, true
	stateful := sandboxtest.Profile("stateful", sandbox.ScopePerSession, &caps)
	stateful.Policy.Strict = false
	obs := &executions{}
	b := setup(t, sandboxtest.Options{
		Profiles: []sandbox.ProfileSpec{lax, stateful}, Observer: obs,
		Settings: sandbox.Settings{Quotas: sandbox.Quotas{Contexts: 1}},
	})
	admin := b.Principal(t, "root")
	admin.Admin = true

	t.Run("paused", func(t *testing.T) {
		sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{})
		require.NoError(t, err)
		b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "print(1)"})
		_, _, err = b.Service.PauseSession(b.ctx, b.alice, sess.ID, "")
		require.NoError(t, err)
		before, counted := b.taskCount(t, b.alice), obs.counts()
		_, err = b.Service.Execute(b.ctx, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "print(2)"})
		require.Error(t, err)
		assert.Equal(t, fault.Paused, fault.KindOf(err))
		assert.Equal(t, before, b.taskCount(t, b.alice), "no task")
		assert.Equal(t, counted, obs.counts(), "no execution metric")
	})

	t.Run("contexts_quota", func(t *testing.T) {
		sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Profile: "stateful"})
		require.NoError(t, err)
		b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "a = 1", Context: "one"})
		before, counted := b.taskCount(t, b.alice), obs.counts()
		_, err = b.Service.Execute(b.ctx, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "b = 2", Context: "two"})
		require.Error(t, err)
		assert.Equal(t, fault.Quota, fault.KindOf(err))
		assert.Equal(t, before, b.taskCount(t, b.alice), "no task")
		assert.Equal(t, counted, obs.counts(), "no execution metric")
		events, _, err := b.Service.Audit(b.ctx, admin, sandbox.AuditQuery{Limit: 100})
		require.NoError(t, err)
		for _, e := range events {
			assert.NotEqual(t, "b = 2", e.Excerpt, "no audit event")
		}
	})

	t.Run("background_on_paused", func(t *testing.T) {
		sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Profile: "stateful"})
		require.NoError(t, err)
		b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "print(1)"})
		_, _, err = b.Service.PauseSession(b.ctx, b.alice, sess.ID, "")
		require.NoError(t, err)
		before := b.taskCount(t, b.alice)
		_, err = b.Service.Execute(b.ctx, b.alice, sandbox.ExecInput{SessionID: sess.ID, Command: "sleep 100", Background: true})
		require.Error(t, err)
		assert.Equal(t, fault.Paused, fault.KindOf(err))
		assert.Equal(t, before, b.taskCount(t, b.alice), "no task")
	})
}

// A refused execution whose caller already holds its task (promoted while an earlier
// execution held the session) fails with the refusal once its turn comes: the task stays,
// and still no execution metric counts it.
func TestRefusalOfAPromotedExecutionFailsItsTask(t *testing.T) {
	t.Parallel()
	caps := sandboxtest.DefaultCapabilities()
	caps.Stateful = true
	obs := &executions{}
	b := setup(t, sandboxtest.Options{
		Profiles: []sandbox.ProfileSpec{sandboxtest.Profile("default", sandbox.ScopePerSession, &caps)}, Observer: obs,
		Settings: sandbox.Settings{Quotas: sandbox.Quotas{Contexts: 1}},
	})
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{})
	require.NoError(t, err)
	b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "a = 1", Context: "one"})
	g := b.Provider(t, "default").Hold()
	first := b.submit(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "long", Wait: wait(0)})
	waitFor(t, g.Started(), "the first execution")
	out, err := b.Service.Execute(b.ctx, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "c = 3", Context: "three", Wait: wait(0)})
	task := promoted(t, out, err)
	g.Release(0, "", "")
	b.finished(t, b.alice, first.ID)
	done := b.finished(t, b.alice, task.ID)
	assert.Equal(t, sandbox.TaskFailed, done.Status)
	assert.Equal(t, string(fault.Quota), done.ErrorType)
	assert.Contains(t, done.Error, "sandbox.quotas.contexts")
	require.NoError(t, b.Service.Close(b.ctx), "every job has ended, and told the observer")
	assert.Equal(t, map[string]int{sandbox.TaskSucceeded: 2}, obs.counts(), "the two that ran; not the refusal")
}

// Pausing the default session on a strict profile whose provider cannot pause is refused
// before the default session is made.
func TestRefusedPauseMakesNoDefaultSession(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	_, _, err := b.Service.PauseSession(b.ctx, b.alice, sandbox.DefaultSessionID, "")
	require.Error(t, err)
	assert.Equal(t, fault.Capability, fault.KindOf(err))
	listed, _, err := b.Service.ListSessions(b.ctx, b.alice, sandbox.ListFilter{Limit: 10})
	require.NoError(t, err)
	assert.Empty(t, listed, "no session was made")
	_, err = b.Service.ResumeSession(b.ctx, b.bob, sandbox.DefaultSessionID, "shared")
	assert.Equal(t, fault.Forbidden, fault.KindOf(err), "the shared session: admins only")
}

// A replica that remembers the default session (its identity cache) still makes a new one
// once another replica's failed destroy closed it, instead of refusing the call.
func TestClosedDefaultSessionOnAnotherReplica(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	other := sandboxtest.New(t, sandboxtest.Options{Store: b.Store, Clock: b.Clock, Profiles: b.Profiles, RunnerID: "runner-2"})
	first := b.exec(t, b.alice, sandbox.ExecInput{SessionID: sandbox.DefaultSessionID, Code: "print(1)"})
	b.Provider(t, "default").FailDestroy(1, fault.New(fault.Provision, "busy"))
	d, err := other.Service.DestroySession(b.ctx, b.alice, sandbox.DefaultSessionID, "")
	require.NoError(t, err)
	require.True(t, d.Pending)
	require.Equal(t, first.SessionID, d.SessionID)

	next := b.exec(t, b.alice, sandbox.ExecInput{SessionID: sandbox.DefaultSessionID, Code: "print(2)"})
	assert.NotEqual(t, first.SessionID, next.SessionID, "a new default, not a refusal")
	_, err = b.Service.Execute(b.ctx, b.alice, sandbox.ExecInput{SessionID: first.SessionID, Code: "print(3)"})
	assert.Equal(t, fault.Conflict, fault.KindOf(err), "the closed one, named, is refused")
}
