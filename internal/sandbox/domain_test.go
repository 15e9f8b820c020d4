package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
	"github.com/sandgate/sandgate/internal/spool"
	"github.com/sandgate/sandgate/internal/store"
	"github.com/sandgate/sandgate/internal/store/memory"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The domain against its in-memory ports: no Postgres, no Docker, no sleeping. Time moves
// with the manual clock; executions that must still be running are held by the fake
// provider's gates.

const idle = 10 * time.Minute // sandboxtest.Profile's idle timeout

// bundle is one test's domain with two recorded principals.
type bundle struct {
	*sandboxtest.Env
	ctx        context.Context
	alice, bob principal.Principal
}

// setup builds the domain with four profiles on fake providers — default (per_session),
// oneshot (per_call), shared (per_runtime) and gpu (per_session, restricted to group gpu) —
// unless opts names its own.
func setup(t *testing.T, opts sandboxtest.Options) *bundle {
	t.Helper()
	if opts.Profiles == nil {
		gpu := sandboxtest.Profile("gpu", sandbox.ScopePerSession, nil)
		gpu.AllowedGroups = []string{"gpu"}
		opts.Profiles = []sandbox.ProfileSpec{
			sandboxtest.Profile("default", sandbox.ScopePerSession, nil),
			sandboxtest.Profile("oneshot", sandbox.ScopePerCall, nil),
			sandboxtest.Profile("shared", sandbox.ScopePerRuntime, nil),
			gpu,
		}
	}
	env := sandboxtest.New(t, opts)
	return &bundle{Env: env, ctx: t.Context(), alice: env.Principal(t, "alice"), bob: env.Principal(t, "bob")}
}

func wait(d time.Duration) *time.Duration { return &d }

// result requires a finished execution and returns its result.
func result(t *testing.T, out sandbox.Outcome, err error) *sandbox.Result {
	t.Helper()
	require.NoError(t, err)
	require.NotNil(t, out.Result, "the execution finished within its wait")
	return out.Result
}

// promoted requires an execution promoted to a task and returns the task.
func promoted(t *testing.T, out sandbox.Outcome, err error) *sandbox.Task {
	t.Helper()
	require.NoError(t, err)
	require.Nil(t, out.Result)
	require.NotNil(t, out.Task, "the execution was promoted to a task")
	return out.Task
}

// exec runs in and requires its result.
func (b *bundle) exec(t *testing.T, p principal.Principal, in sandbox.ExecInput) *sandbox.Result {
	t.Helper()
	out, err := b.Service.Execute(b.ctx, p, in)
	return result(t, out, err)
}

// run runs in on a per_call profile and requires its result.
func (b *bundle) run(t *testing.T, p principal.Principal, in sandbox.ExecInput) *sandbox.Result {
	t.Helper()
	out, err := b.Service.Run(b.ctx, p, in)
	return result(t, out, err)
}

// submit executes in and requires it to be promoted to a task.
func (b *bundle) submit(t *testing.T, p principal.Principal, in sandbox.ExecInput) *sandbox.Task {
	t.Helper()
	out, err := b.Service.Execute(b.ctx, p, in)
	return promoted(t, out, err)
}

// finished waits for task id to finish and returns it as p sees it.
func (b *bundle) finished(t *testing.T, p principal.Principal, id string) sandbox.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	_, err := b.Store.WaitTask(ctx, id)
	require.NoError(t, err, "task %s did not finish", id)
	task, err := b.Service.GetTask(b.ctx, p, id)
	require.NoError(t, err)
	return task
}

// waitFor fails the test unless ch is closed within a generous bound.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func requireKind(t *testing.T, err error, k fault.Kind) {
	t.Helper()
	require.Error(t, err)
	require.Equalf(t, k, fault.KindOf(err), "want a %s fault, got: %v", k, err)
}

func TestPerCallRunsInAFreshSandboxEachTime(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "oneshot")
	prov.Next(sandboxtest.Reply(0, "one\n", ""), sandboxtest.Reply(0, "two\n", ""), sandboxtest.Reply(0, "three\n", ""))

	r1 := b.run(t, b.alice, sandbox.ExecInput{Profile: "oneshot", Code: "print(1)"})
	r2 := b.run(t, b.alice, sandbox.ExecInput{Profile: "oneshot", Code: "print(2)"})
	// The default session of a per_call profile is a run as well.
	r3 := b.exec(t, b.alice, sandbox.ExecInput{SessionID: sandbox.DefaultSessionID, Profile: "oneshot", Code: "print(3)"})
	assert.Equal(t, []string{"one\n", "two\n", "three\n"}, []string{r1.Stdout, r2.Stdout, r3.Stdout})

	created := prov.Created()
	require.Len(t, created, 3)
	assert.Len(t, slices.Compact(slices.Sorted(slices.Values(created))), 3, "a fresh sandbox each time")
	assert.Equal(t, created, prov.Destroyed(), "each destroyed after its run")
	assert.Empty(t, prov.Live())
	assert.Zero(t, prov.Counts().Attach)
	for i, e := range prov.Execs() {
		assert.Equal(t, created[i], e.SandboxID)
	}
	_, err := b.Service.GetSession(b.ctx, b.alice, r1.SessionID, "")
	requireKind(t, err, fault.NotFound) // a run keeps no session
	task, err := b.Service.GetTask(b.ctx, b.alice, r1.TaskID)
	require.NoError(t, err)
	assert.Equal(t, sandbox.TaskSucceeded, task.Status, "runs are recorded as tasks")
}

func TestPerCallRefusesSessions(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	_, err := b.Service.Run(b.ctx, b.alice, sandbox.ExecInput{Profile: "default", Code: "x"})
	requireKind(t, err, fault.Conflict)
	_, err = b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Profile: "oneshot"})
	requireKind(t, err, fault.Conflict)
	_, err = b.Service.GetSession(b.ctx, b.alice, sandbox.DefaultSessionID, "oneshot")
	requireKind(t, err, fault.Conflict)

	// A session row of a per_call profile (made before the profile changed scope): an
	// explicit id is refused, not run.
	require.NoError(t, b.Store.CreateSessionWithin(b.ctx, store.Session{
		ID: "legacy", OwnerID: b.alice.ID, Profile: "oneshot", Provider: sandboxtest.DefaultType, Scope: sandbox.ScopePerSession,
		Status: "active", CreatedAt: b.Clock.Now(),
	}, 0))
	_, err = b.Service.Execute(b.ctx, b.alice, sandbox.ExecInput{SessionID: "legacy", Code: "x"})
	requireKind(t, err, fault.Conflict)
	assert.Contains(t, err.Error(), "scope per_call")
	assert.Empty(t, b.Provider(t, "oneshot").Execs())
}

func TestPerSessionReusesItsSandbox(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "default")
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Profile: "default", Name: "work"})
	require.NoError(t, err)
	assert.Empty(t, sess.SandboxID, "provisioned on first use")
	assert.Zero(t, prov.Counts().Create)

	for range 3 {
		r := b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
		assert.Equal(t, sess.ID, r.SessionID)
		assert.Empty(t, r.Notice)
	}
	assert.Equal(t, sandboxtest.Counts{Create: 1, Attach: 2}, prov.Counts())
	created := prov.Created()
	for _, e := range prov.Execs() {
		assert.Equal(t, created[0], e.SandboxID, "one sandbox for the session")
	}
	got, err := b.Service.GetSession(b.ctx, b.alice, sess.ID, "")
	require.NoError(t, err)
	assert.Equal(t, created[0], got.SandboxID)

	// The default session: made on first use, then the same one.
	d1 := b.exec(t, b.alice, sandbox.ExecInput{Code: "x"})
	d2 := b.exec(t, b.alice, sandbox.ExecInput{SessionID: sandbox.DefaultSessionID, Code: "x"})
	assert.Equal(t, d1.SessionID, d2.SessionID)
	assert.NotEqual(t, sess.ID, d1.SessionID)
	def, err := b.Service.GetSession(b.ctx, b.alice, sandbox.DefaultSessionID, "")
	require.NoError(t, err)
	assert.True(t, def.IsDefault)
	assert.Equal(t, d1.SessionID, def.ID)
	assert.Len(t, prov.Created(), 2)
}

func TestPerRuntimeSharesOneSession(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "shared")
	ra := b.exec(t, b.alice, sandbox.ExecInput{Profile: "shared", Code: "x"})
	rb := b.exec(t, b.bob, sandbox.ExecInput{Profile: "shared", Code: "x"})
	assert.Equal(t, ra.SessionID, rb.SessionID, "every caller works in the one session")
	assert.Equal(t, 1, prov.Counts().Create)

	sess, err := b.Service.GetSession(b.ctx, b.bob, ra.SessionID, "")
	require.NoError(t, err, "the shared session is visible to every allowed caller")
	assert.True(t, sess.Shared)
	assert.Empty(t, sess.OwnerID)
	_, err = b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Profile: "shared"})
	requireKind(t, err, fault.Conflict)
	_, err = b.Service.DestroySession(b.ctx, b.bob, sandbox.DefaultSessionID, "shared")
	requireKind(t, err, fault.Forbidden)
	assert.Empty(t, prov.Destroyed())

	admin := b.alice
	admin.Admin = true
	_, err = b.Service.DestroySession(b.ctx, admin, ra.SessionID, "")
	require.NoError(t, err)
	assert.Equal(t, prov.Created(), prov.Destroyed())
}

// A session unused for longer than its profile's idle timeout loses its sandbox on next use,
// and that use says so; exactly the timeout is not longer.
func TestIdleSessionGetsAFreshSandbox(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "default")
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{})
	require.NoError(t, err)
	b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
	first := prov.Created()[0]

	b.Clock.Advance(idle)
	r := b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
	assert.Empty(t, r.Notice, "idle for exactly the timeout is not idle for more")
	assert.Len(t, prov.Created(), 1)

	b.Clock.Advance(idle + time.Second)
	r = b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
	assert.Equal(t, "sandbox session '"+sess.ID+"' was idle for more than 600s and has been reset; its previous workspace state was discarded", r.Notice)
	assert.Equal(t, []string{first}, prov.Destroyed())
	created := prov.Created()
	require.Len(t, created, 2)
	execs := prov.Execs()
	assert.Equal(t, created[1], execs[len(execs)-1].SandboxID, "the execution ran in the fresh sandbox")

	r = b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
	assert.Empty(t, r.Notice, "the notice is given once")
}

// The sweeper frees an idle session's sandbox; the session's next operation gets the notice.
func TestIdleSweepFreesTheSandbox(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "default")
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{})
	require.NoError(t, err)
	b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
	first := prov.Created()[0]

	b.Service.SweepNow(b.ctx)
	assert.Empty(t, prov.Destroyed(), "not idle yet")
	b.Clock.Advance(idle + time.Minute)
	b.Service.SweepNow(b.ctx)
	assert.Equal(t, []string{first}, prov.Destroyed())
	assert.Empty(t, prov.Live())
	got, err := b.Service.GetSession(b.ctx, b.alice, sess.ID, "")
	require.NoError(t, err)
	assert.Empty(t, got.SandboxID)

	r := b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
	assert.Contains(t, r.Notice, "was idle for more than 600s and has been reset")
	assert.Len(t, prov.Created(), 2)
}

// A managed sandbox that vanished is recreated, empty, and the caller is told.
func TestLostSandboxIsRecreated(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "default")
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{})
	require.NoError(t, err)
	_, err = b.Service.WriteFile(b.ctx, b.alice, sess.ID, "", "notes.txt", strings.NewReader("kept?"), 5)
	require.NoError(t, err)
	b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
	first := prov.Created()[0]

	require.True(t, prov.Lose(first))
	r := b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
	assert.Equal(t, "the sandbox behind session '"+sess.ID+"' no longer existed and was recreated empty; its previous workspace state is gone", r.Notice)
	created := prov.Created()
	require.Len(t, created, 2)
	assert.Empty(t, prov.Destroyed())
	got, err := b.Service.GetSession(b.ctx, b.alice, sess.ID, "")
	require.NoError(t, err)
	assert.Equal(t, created[1], got.SandboxID)
	_, _, err = b.Service.ReadFile(b.ctx, b.alice, sess.ID, "", "notes.txt")
	requireKind(t, err, fault.NotFound) // the new sandbox starts empty

	r = b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
	assert.Empty(t, r.Notice)
}

// Two executions of one session run one after the other, in the order they were submitted.
func TestSessionExecutionsRunInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "default")
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{})
	require.NoError(t, err)
	g1, g2 := sandboxtest.NewGate(), sandboxtest.NewGate()
	prov.Handle("first", g1.Program)
	prov.Handle("second", g2.Program)

	t1 := b.submit(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "first", Wait: wait(0)})
	waitFor(t, g1.Started(), "the first execution")
	t2 := b.submit(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "second", Wait: wait(0)})
	got, err := b.Service.GetTask(b.ctx, b.alice, t2.ID)
	require.NoError(t, err)
	assert.Equal(t, sandbox.TaskPending, got.Status, "the second waits for the session")
	select {
	case <-g2.Started():
		t.Fatal("the second execution started while the first ran")
	default:
	}

	g1.Release(0, "1\n", "")
	waitFor(t, g2.Started(), "the second execution")
	assert.Equal(t, sandbox.TaskSucceeded, b.finished(t, b.alice, t1.ID).Status)
	g2.Release(0, "2\n", "")
	second := b.finished(t, b.alice, t2.ID)
	assert.Equal(t, sandbox.TaskSucceeded, second.Status)
	assert.Equal(t, "2\n", second.Result.Stdout)

	var codes []string
	for _, e := range prov.Execs() {
		codes = append(codes, e.Spec.Code)
	}
	assert.Equal(t, []string{"first", "second"}, codes)
	assert.Equal(t, 1, prov.MaxParallel(prov.Created()[0]), "never at once")
}

// Executions submitted one after another run in that order even when none has started yet:
// each takes its place in the session's line when it is submitted, not when its goroutine
// gets to run.
func TestSubmittedExecutionsKeepTheirOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "default")
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{})
	require.NoError(t, err)
	hold := sandboxtest.NewGate()
	prov.Handle("hold", hold.Program)
	first := b.submit(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "hold", Wait: wait(0)})
	waitFor(t, hold.Started(), "the holding execution")

	const n = 20
	ids := make([]string, n)
	for i := range n {
		ids[i] = b.submit(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: fmt.Sprintf("step-%02d", i), Wait: wait(0)}).ID
	}
	hold.Release(0, "", "")
	b.finished(t, b.alice, first.ID)
	for _, id := range ids {
		b.finished(t, b.alice, id)
	}
	var codes []string
	for _, e := range prov.Execs()[1:] {
		codes = append(codes, e.Spec.Code)
	}
	want := make([]string, n)
	for i := range n {
		want[i] = fmt.Sprintf("step-%02d", i)
	}
	assert.Equal(t, want, codes, "executions ran in submission order")
}

// A completion the response store refuses is kept and retried, never dropped and never run
// again: the caller gets its result at once, and the task reads finished once the store
// answers (docs/semantics.md §9 Completion).
func TestCompletionSurvivesAStoreOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "default")
	b.Store.FailFinish(3)
	res := b.exec(t, b.alice, sandbox.ExecInput{Code: "print(1)"})
	require.NotEmpty(t, res.TaskID)
	task := b.finished(t, b.alice, res.TaskID)
	assert.Equal(t, sandbox.TaskSucceeded, task.Status)
	require.NotNil(t, task.Result)
	assert.Equal(t, res.Stdout, task.Result.Stdout)
	assert.Len(t, prov.Execs(), 1, "the execution ran once")
}

// An execution that outlives its wait is promoted to a task, which later finishes with the
// execution's result; one that ends in time returns its result.
func TestPromotion(t *testing.T) {
	t.Parallel()
	for name, w := range map[string]time.Duration{"no_wait": 0, "wait_shorter_than_run": time.Millisecond} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, sandboxtest.Options{})
			g := b.Provider(t, "default").Hold()
			task := b.submit(t, b.alice, sandbox.ExecInput{Code: "long", Wait: wait(w)})
			assert.True(t, task.Promoted)
			assert.Nil(t, task.FinishedAt)
			waitFor(t, g.Started(), "the execution")
			running, err := b.Service.GetTask(b.ctx, b.alice, task.ID)
			require.NoError(t, err)
			assert.Equal(t, sandbox.TaskRunning, running.Status)

			g.Release(3, "done\n", "warn\n")
			done := b.finished(t, b.alice, task.ID)
			assert.Equal(t, sandbox.TaskSucceeded, done.Status, "a non-zero exit is a result")
			require.NotNil(t, done.Result)
			assert.Equal(t, "done\n", done.Result.Stdout)
			assert.Equal(t, "warn\n", done.Result.Stderr)
			require.NotNil(t, done.Result.ExitCode)
			assert.Equal(t, 3, *done.Result.ExitCode)
			assert.Equal(t, task.ID, done.Result.TaskID)
			assert.True(t, done.Promoted)
		})
	}

	t.Run("in_time", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sandboxtest.Options{})
		r := b.exec(t, b.alice, sandbox.ExecInput{Code: "quick"})
		task, err := b.Service.GetTask(b.ctx, b.alice, r.TaskID)
		require.NoError(t, err)
		assert.Equal(t, sandbox.TaskSucceeded, task.Status)
		assert.False(t, task.Promoted)
	})

	t.Run("wait_timeout_zero_always_promotes", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sandboxtest.Options{AlwaysPromote: true})
		task := b.submit(t, b.alice, sandbox.ExecInput{Code: "quick"})
		assert.Equal(t, sandbox.TaskSucceeded, b.finished(t, b.alice, task.ID).Status)
	})
}

func TestCancelRunningTask(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "default")
	g := prov.Hold()
	task := b.submit(t, b.alice, sandbox.ExecInput{Code: "long", Wait: wait(0)})
	waitFor(t, g.Started(), "the execution")

	_, err := b.Service.CancelTask(b.ctx, b.bob, task.ID)
	requireKind(t, err, fault.NotFound)

	got, err := b.Service.CancelTask(b.ctx, b.alice, task.ID)
	require.NoError(t, err)
	assert.Equal(t, sandbox.TaskCancelled, got.Status)
	require.NotNil(t, got.FinishedAt)
	require.NotNil(t, got.Result)
	assert.Equal(t, sandbox.ResultCancelled, got.Result.Status)
	waitFor(t, g.Done(), "the program to return")
	assert.ErrorIs(t, g.Err(), context.Canceled, "the provider saw its ctx cancelled")
	execs := prov.Execs()
	require.Len(t, execs, 1)
	assert.True(t, execs[0].Cancelled)

	again, err := b.Service.CancelTask(b.ctx, b.alice, task.ID)
	require.NoError(t, err)
	assert.Equal(t, sandbox.TaskCancelled, again.Status, "a finished task is returned unchanged")
}

func TestQuotas(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{Settings: sandbox.Settings{Quotas: sandbox.Quotas{ConcurrentExecutions: 1, Sessions: 2, AdminsExempt: true}}})
	g := b.Provider(t, "default").Hold()
	held := b.submit(t, b.alice, sandbox.ExecInput{Code: "long", Wait: wait(0)})
	waitFor(t, g.Started(), "the held execution") // g is taken: later executions run at once

	_, err := b.Service.Execute(b.ctx, b.alice, sandbox.ExecInput{Code: "more"})
	requireKind(t, err, fault.Quota)
	var fe *fault.Error
	require.True(t, errors.As(err, &fe))
	assert.Positive(t, fe.RetryAfter)
	usage, err := b.Service.Usage(b.ctx, b.alice)
	require.NoError(t, err)
	assert.Equal(t, sandbox.Quota{Used: 1, Limit: 1}, usage.ConcurrentExecutions)

	b.exec(t, b.bob, sandbox.ExecInput{Code: "bob's"}) // quotas are per principal
	admin := b.Env.Principal(t, "root")
	admin.Admin = true
	g2 := b.Provider(t, "default").Hold()
	adminTask := b.submit(t, admin, sandbox.ExecInput{Code: "long", Wait: wait(0)})
	waitFor(t, g2.Started(), "the admin's held execution")
	b.exec(t, admin, sandbox.ExecInput{Profile: "oneshot", Code: "exempt"})
	usage, err = b.Service.Usage(b.ctx, admin)
	require.NoError(t, err)
	assert.Equal(t, -1, usage.ConcurrentExecutions.Limit, "admins are exempt")

	g.Release(0, "", "")
	b.finished(t, b.alice, held.ID)
	b.exec(t, b.alice, sandbox.ExecInput{Code: "now"})
	g2.Release(0, "", "")
	b.finished(t, admin, adminTask.ID)

	carol := b.Env.Principal(t, "carol")
	for range 2 {
		_, err := b.Service.CreateSession(b.ctx, carol, sandbox.CreateSessionInput{})
		require.NoError(t, err)
	}
	_, err = b.Service.CreateSession(b.ctx, carol, sandbox.CreateSessionInput{})
	requireKind(t, err, fault.Quota)
	usage, err = b.Service.Usage(b.ctx, carol)
	require.NoError(t, err)
	assert.Equal(t, sandbox.Quota{Used: 2, Limit: 2}, usage.Sessions)
}

func TestProfileAccess(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "gpu")
	_, err := b.Service.Execute(b.ctx, b.alice, sandbox.ExecInput{Profile: "gpu", Code: "x"})
	requireKind(t, err, fault.Forbidden)
	_, err = b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Profile: "gpu"})
	requireKind(t, err, fault.Forbidden)

	_, err = b.Service.Execute(b.ctx, b.alice, sandbox.ExecInput{Profile: "nope", Code: "x"})
	requireKind(t, err, fault.Config)
	assert.Contains(t, err.Error(), "unknown sandbox profile 'nope'")
	assert.Contains(t, err.Error(), "default")
	assert.NotContains(t, err.Error(), "gpu", "restricted profiles stay hidden from those who may not use them")
	assert.Empty(t, prov.Calls(), "refused before any provider call")

	names := func(p principal.Principal) []string {
		var out []string
		for _, prof := range b.Service.Profiles(p) {
			out = append(out, prof.Name)
		}
		return out
	}
	assert.Equal(t, []string{"default", "oneshot", "shared"}, names(b.alice))
	carol := b.Env.Principal(t, "carol", "gpu")
	assert.Equal(t, []string{"default", "gpu", "oneshot", "shared"}, names(carol))
	sess, err := b.Service.CreateSession(b.ctx, carol, sandbox.CreateSessionInput{Profile: "gpu"})
	require.NoError(t, err)
	b.exec(t, carol, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})

	// The group is checked on every use, not only when the session was made.
	carol.Groups = nil
	_, err = b.Service.Execute(b.ctx, carol, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
	requireKind(t, err, fault.Policy)
	assert.Len(t, prov.Execs(), 1)
}

// Another principal's session or task is not found, never forbidden, and nothing of it moves.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "default")
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Name: "private"})
	require.NoError(t, err)
	r := b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})

	_, err = b.Service.Execute(b.ctx, b.bob, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
	requireKind(t, err, fault.NotFound)
	assert.Contains(t, err.Error(), "unknown sandbox session")
	_, err = b.Service.GetSession(b.ctx, b.bob, sess.ID, "")
	requireKind(t, err, fault.NotFound)
	_, err = b.Service.WriteFile(b.ctx, b.bob, sess.ID, "", "x.txt", strings.NewReader("x"), 1)
	requireKind(t, err, fault.NotFound)
	_, err = b.Service.GetTask(b.ctx, b.bob, r.TaskID)
	requireKind(t, err, fault.NotFound)
	_, err = b.Service.CancelTask(b.ctx, b.bob, r.TaskID)
	requireKind(t, err, fault.NotFound)

	list, _, err := b.Service.ListSessions(b.ctx, b.bob, sandbox.ListFilter{Limit: 10})
	require.NoError(t, err)
	for _, s := range list {
		assert.NotEqual(t, sess.ID, s.ID)
	}
	tasks, _, err := b.Service.ListTasks(b.ctx, b.bob, sandbox.TaskFilter{Limit: 10})
	require.NoError(t, err)
	assert.Empty(t, tasks)

	d, err := b.Service.DestroySession(b.ctx, b.bob, sess.ID, "")
	require.NoError(t, err, "destroying an unknown session succeeds")
	assert.Equal(t, sandbox.Destroyed{SessionID: sess.ID}, d)
	still, err := b.Service.GetSession(b.ctx, b.alice, sess.ID, "")
	require.NoError(t, err, "and leaves another's session alone")
	assert.Equal(t, prov.Created()[0], still.SandboxID)
	assert.Empty(t, prov.Destroyed())
	assert.Len(t, prov.Execs(), 1)

	admin := b.bob
	admin.Admin = true
	_, err = b.Service.GetSession(b.ctx, admin, sess.ID, "")
	require.NoError(t, err, "administrators see every session")
}

// A completion the response store refuses is in the spool before the caller gets its
// result; a service that stops before the store answers leaves it there, and the next
// service on the same spool records it — also over a `lost` verdict another replica reported
// meanwhile, since the runner that ran the execution knows how it ended (docs/semantics.md
// §9 Completion).
func TestSpooledCompletionOutlivesItsService(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	sp, err := spool.Open(t.TempDir(), 1<<20)
	require.NoError(t, err)
	st, clock := memory.New(), sandboxtest.NewClock(sandboxtest.T0)
	first := sandboxtest.New(t, sandboxtest.Options{Store: st, Clock: clock, Spool: sp})
	alice := first.Principal(t, "alice")
	first.Provider(t, "default").SetProgram(sandboxtest.Reply(0, "kept\n", "also kept\n"))
	st.FailFinish(1 << 30)
	out, err := first.Service.Execute(ctx, alice, sandbox.ExecInput{Code: "work"})
	res := result(t, out, err)
	assert.Equal(t, "kept\n", res.Stdout)
	ids, err := sp.IDs()
	require.NoError(t, err)
	require.Equal(t, []string{res.TaskID}, ids, "spooled before the answer")
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	_ = first.Service.Close(stopped) // nothing runs: the completion waits in memory and the spool
	st.FailFinish(0)

	clock.Advance(time.Hour) // the first runner's heartbeat is long stale
	other := sandboxtest.New(t, sandboxtest.Options{Store: st, Clock: clock, RunnerID: "runner-2"})
	other.Service.SweepNow(ctx) // the sandbox keeps no execution to adopt: lost
	_, err = st.WaitTask(ctx, res.TaskID)
	require.NoError(t, err)
	lost, err := other.Service.GetTask(ctx, alice, res.TaskID)
	require.NoError(t, err)
	require.Equal(t, sandbox.TaskLost, lost.Status, "a replica without the spool cannot know better")

	again := sandboxtest.New(t, sandboxtest.Options{Store: st, Clock: clock, Spool: sp, RunnerID: "runner-3"})
	again.Service.SweepNow(ctx)
	task, err := again.Service.GetTask(ctx, alice, res.TaskID)
	require.NoError(t, err)
	assert.Equal(t, sandbox.TaskSucceeded, task.Status)
	assert.Empty(t, task.Error)
	require.NotNil(t, task.Result)
	assert.Equal(t, "kept\n", task.Result.Stdout)
	assert.Equal(t, "also kept\n", task.Result.Stderr)
	assert.Equal(t, res.DurationMS, task.Result.DurationMS)
	require.NotNil(t, task.FinishedAt)
	assert.True(t, task.FinishedAt.Equal(sandboxtest.T0), "finished when it did, not when recorded")
	ids, err = sp.IDs()
	require.NoError(t, err)
	assert.Empty(t, ids, "recorded, so no longer spooled")
	ev := auditOfTask(t, st, res.TaskID)
	assert.Equal(t, sandbox.TaskSucceeded, ev.Status, "the audit says what happened")
}

// A spool that cannot take a completion (full) leaves it in memory, retried as without a
// spool; records the store has no task for are kept until that task would have expired (the
// spool may be shared with a gateway of another database), and unreadable ones are left for
// the operator.
func TestSpoolEdges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	full, err := spool.Open(dir, 10)
	require.NoError(t, err)
	b := setup(t, sandboxtest.Options{Spool: full})
	b.Store.FailFinish(3)
	res := b.exec(t, b.alice, sandbox.ExecInput{Code: "print(1)"})
	ids, err := full.IDs()
	require.NoError(t, err)
	assert.Empty(t, ids, "too big for the spool")
	assert.Equal(t, sandbox.TaskSucceeded, b.finished(t, b.alice, res.TaskID).Status, "retried from memory")

	roomy, err := spool.Open(dir, 1<<20)
	require.NoError(t, err)
	c := sandboxtest.New(t, sandboxtest.Options{Spool: roomy, Clock: sandboxtest.NewClock(sandboxtest.T0)})
	foreign := `{"v":1,"task_id":"0123456789abcdef0123456789abcdef","finished_at":"2026-01-05T09:00:00Z","ttl_ns":3600000000000,"status":"succeeded"}`
	require.NoError(t, roomy.Put("0123456789abcdef0123456789abcdef", []byte(foreign)))
	require.NoError(t, roomy.Put("badbadbadbad", []byte("not json")))
	c.Service.SweepNow(ctx)
	ids, err = roomy.IDs()
	require.NoError(t, err)
	slices.Sort(ids)
	assert.Equal(t, []string{"0123456789abcdef0123456789abcdef", "badbadbadbad"}, ids, "kept: unknown before its expiry, and unreadable")
	c.Clock.Advance(2 * time.Hour)
	c.Service.SweepNow(ctx)
	ids, err = roomy.IDs()
	require.NoError(t, err)
	assert.Equal(t, []string{"badbadbadbad"}, ids, "unknown past its expiry: dropped")
}

// auditOfTask is the audit event of task id.
func auditOfTask(t *testing.T, st *memory.Store, id string) store.AuditEvent {
	t.Helper()
	evs, err := st.ListAudit(t.Context(), store.AuditFilter{Limit: 1000})
	require.NoError(t, err)
	for _, e := range evs {
		if e.TaskID == id {
			return e
		}
	}
	t.Fatalf("no audit event for task %s", id)
	return store.AuditEvent{}
}

// Only a plain call that waits lets its writes skip the disk (docs/semantics.md §9 "Deferred
// commits"): its task row always, its completion when it ends within the wait (the caller
// holds the result); a promoted call's completion, and every write of a call that learns the
// task id before the end (Started), wait for the disk.
func TestOnlyPlainCallsDeferTheirWrites(t *testing.T) {
	t.Parallel()
	t.Run("in_time", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sandboxtest.Options{})
		r := b.exec(t, b.alice, sandbox.ExecInput{Code: "quick"})
		assert.Equal(t, memory.DeferredWrites{Row: true, Completion: true}, b.Store.Deferred(r.TaskID))
	})
	t.Run("promoted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sandboxtest.Options{})
		g := b.Provider(t, "default").Hold()
		task := b.submit(t, b.alice, sandbox.ExecInput{Code: "long", Wait: wait(0)})
		waitFor(t, g.Started(), "the execution")
		g.Release(0, "done\n", "")
		b.finished(t, b.alice, task.ID)
		assert.Equal(t, memory.DeferredWrites{Row: true, Completion: false}, b.Store.Deferred(task.ID),
			"the row is put on disk by the promotion; the completion of a promoted task waits for the disk")
	})
	t.Run("followed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, sandboxtest.Options{})
		var id string
		r := b.exec(t, b.alice, sandbox.ExecInput{Code: "quick", Started: func(taskID string) { id = taskID }})
		require.Equal(t, r.TaskID, id)
		assert.Equal(t, memory.DeferredWrites{}, b.Store.Deferred(r.TaskID), "the caller knew the task id before the end")
	})
}
