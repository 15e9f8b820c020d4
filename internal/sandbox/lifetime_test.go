package sandbox_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// A session made with a lifetime is destroyed by the sweep that comes after its end, its
// sandbox and running work with it, audited as its owner's; a later end set meanwhile (only
// ever later with extendOnly) keeps it; 0 clears it.
func TestSessionLifetimeEndsTheSession(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "default")
	admin := b.Principal(t, "root")
	admin.Admin = true

	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Lifetime: time.Minute, Labels: map[string]string{"k": "v"}})
	require.NoError(t, err)
	assert.True(t, sandboxtest.T0.Add(time.Minute).Equal(sess.ExpiresAt), "%v", sess.ExpiresAt)
	assert.Equal(t, sandbox.ExpireDestroy, sess.OnExpiry)
	b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "print(1)"})
	require.Len(t, prov.Live(), 1)

	// Extending only ever moves the end later; setting moves it anywhere.
	got, err := b.Service.SetSessionLifetime(b.ctx, b.alice, sess.ID, "", 30*time.Second, true)
	require.NoError(t, err)
	assert.True(t, sandboxtest.T0.Add(time.Minute).Equal(got.ExpiresAt), "an earlier end is not taken with extendOnly")
	got, err = b.Service.SetSessionLifetime(b.ctx, b.alice, sess.ID, "", 2*time.Minute, true)
	require.NoError(t, err)
	assert.True(t, sandboxtest.T0.Add(2*time.Minute).Equal(got.ExpiresAt))
	got, err = b.Service.SetSessionLifetime(b.ctx, b.alice, sess.ID, "", 90*time.Second, false)
	require.NoError(t, err)
	assert.True(t, sandboxtest.T0.Add(90*time.Second).Equal(got.ExpiresAt))
	got, err = b.Service.GetSession(b.ctx, b.alice, sess.ID, "")
	require.NoError(t, err)
	assert.True(t, sandboxtest.T0.Add(90*time.Second).Equal(got.ExpiresAt), "as stored")

	b.Clock.Advance(89 * time.Second)
	b.Service.SweepNow(b.ctx)
	_, err = b.Service.GetSession(b.ctx, b.alice, sess.ID, "")
	require.NoError(t, err, "not yet")

	b.Clock.Advance(time.Second)
	b.Service.SweepNow(b.ctx)
	_, err = b.Service.GetSession(b.ctx, b.alice, sess.ID, "")
	assert.Equal(t, fault.NotFound, fault.KindOf(err), "destroyed at its end")
	assert.Empty(t, prov.Live(), "its sandbox with it")
	events, _, err := b.Service.Audit(b.ctx, admin, sandbox.AuditQuery{Kind: "session_destroy", Limit: 10})
	require.NoError(t, err)
	require.Len(t, events, 1)
	assert.Equal(t, b.alice.ID, events[0].PrincipalID, "as its owner's")

	// Cleared: it lives on.
	keep, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Lifetime: time.Minute})
	require.NoError(t, err)
	got, err = b.Service.SetSessionLifetime(b.ctx, b.alice, keep.ID, "", 0, false)
	require.NoError(t, err)
	assert.True(t, got.ExpiresAt.IsZero())
	b.Clock.Advance(time.Hour)
	b.Service.SweepNow(b.ctx)
	_, err = b.Service.GetSession(b.ctx, b.alice, keep.ID, "")
	require.NoError(t, err)
}

// ExpirePause pauses the session at its end instead (its sandbox and files kept) and clears
// its lifetime; a profile that can neither pause nor hold refuses it at creation.
func TestSessionLifetimePauses(t *testing.T) {
	t.Parallel()
	lax := sandboxtest.Profile("default", sandbox.ScopePerSession, nil)
	lax.Policy.Strict = false // held on pause: the fake provider cannot freeze
	b := setup(t, sandboxtest.Options{Profiles: []sandbox.ProfileSpec{lax, sandboxtest.Profile("strict", sandbox.ScopePerSession, nil)}})
	prov := b.Provider(t, "default")

	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Lifetime: time.Minute, OnExpiry: sandbox.ExpirePause})
	require.NoError(t, err)
	assert.Equal(t, sandbox.ExpirePause, sess.OnExpiry)
	b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "print(1)"})
	b.Clock.Advance(time.Minute)
	b.Service.SweepNow(b.ctx)
	got, err := b.Service.GetSession(b.ctx, b.alice, sess.ID, "")
	require.NoError(t, err)
	assert.Equal(t, sandbox.StatePaused, got.State)
	assert.True(t, got.ExpiresAt.IsZero(), "its lifetime is cleared")
	assert.Len(t, prov.Live(), 1, "its sandbox is kept")

	// Resumed, it is given a new lifetime.
	_, err = b.Service.ResumeSession(b.ctx, b.alice, sess.ID, "")
	require.NoError(t, err)
	got, err = b.Service.SetSessionLifetime(b.ctx, b.alice, sess.ID, "", time.Minute, true)
	require.NoError(t, err)
	assert.Equal(t, sandbox.StateRunning, got.State)
	assert.False(t, got.ExpiresAt.IsZero())

	_, err = b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Profile: "strict", Lifetime: time.Minute, OnExpiry: sandbox.ExpirePause})
	assert.Equal(t, fault.Capability, fault.KindOf(err), "%v", err)
}

// Lifetimes out of bounds, unknown actions, default and other principals' sessions.
func TestSessionLifetimeRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	for _, in := range []sandbox.CreateSessionInput{
		{Lifetime: -time.Second}, {Lifetime: time.Millisecond}, {Lifetime: sandbox.MaxLifetime + time.Second},
		{Lifetime: time.Minute, OnExpiry: "hibernate"},
	} {
		_, err := b.Service.CreateSession(b.ctx, b.alice, in)
		assert.Equal(t, fault.Validation, fault.KindOf(err), "%+v: %v", in, err)
	}
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{})
	require.NoError(t, err)
	assert.True(t, sess.ExpiresAt.IsZero(), "none unless given")
	_, err = b.Service.SetSessionLifetime(b.ctx, b.bob, sess.ID, "", time.Minute, false)
	assert.Equal(t, fault.NotFound, fault.KindOf(err))
	_, err = b.Service.SetSessionLifetime(b.ctx, b.alice, sandbox.DefaultSessionID, "", time.Minute, false)
	assert.Equal(t, fault.Conflict, fault.KindOf(err))
	_, err = b.Service.SetSessionLifetime(b.ctx, b.alice, sess.ID, "", sandbox.MaxLifetime+time.Second, false)
	assert.Equal(t, fault.Validation, fault.KindOf(err))
}

// A session's environment reaches every program run in it, under the execution's own; a bad
// name is refused when the session is made.
func TestSessionEnvironment(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "default")
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Env: map[string]string{"A": "session", "B": "session"}})
	require.NoError(t, err)
	b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "print(1)", Env: map[string]string{"B": "own", "C": "own"}})
	b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "print(2)"})
	execs := prov.Execs()
	require.Len(t, execs, 2)
	assert.Equal(t, map[string]string{"A": "session", "B": "own", "C": "own"}, execs[0].Spec.Env)
	assert.Equal(t, map[string]string{"A": "session", "B": "session"}, execs[1].Spec.Env)

	_, err = b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Env: map[string]string{"1BAD": "x"}})
	assert.Equal(t, fault.Validation, fault.KindOf(err))
}
