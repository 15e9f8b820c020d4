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

// A session's cpu and memory_mb bound its sandbox within the profile's policy: the provider
// is handed the lowered policy; more than the policy, or a provider that cannot bound
// resources, is refused (fail closed) and makes no session.
func TestSessionResources(t *testing.T) {
	t.Parallel()
	caps := sandboxtest.DefaultCapabilities()
	caps.PolicyResources = true
	bounded := sandboxtest.Profile("default", sandbox.ScopePerSession, &caps)
	bounded.Policy.CPU, bounded.Policy.MemoryMB = 2, 1024
	b := setup(t, sandboxtest.Options{Profiles: []sandbox.ProfileSpec{bounded, sandboxtest.Profile("plain", sandbox.ScopePerSession, nil)}})
	prov := b.Provider(t, "default")

	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{CPU: 0.5, MemoryMB: 256})
	require.NoError(t, err)
	assert.Equal(t, 0.5, sess.CPU)
	assert.Equal(t, 256, sess.MemoryMB)
	b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "print(1)"})
	var created []sandboxtest.Call
	for _, c := range prov.Calls() {
		if c.Op == "create" {
			created = append(created, c)
		}
	}
	require.Len(t, created, 1)
	assert.Equal(t, 0.5, created[0].Policy.CPU)
	assert.Equal(t, 256, created[0].Policy.MemoryMB)
	assert.Equal(t, time.Minute, created[0].Policy.Timeout, "the rest is the profile's")

	// Without a request: the profile's policy.
	whole, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{})
	require.NoError(t, err)
	b.exec(t, b.alice, sandbox.ExecInput{SessionID: whole.ID, Code: "print(1)"})
	calls := prov.Calls()
	assert.Equal(t, bounded.Policy.CPU, calls[len(calls)-1].Policy.CPU)

	for _, in := range []sandbox.CreateSessionInput{{CPU: 3}, {MemoryMB: 2048}, {Profile: "plain", CPU: 1}, {Profile: "plain", MemoryMB: 64}} {
		_, err := b.Service.CreateSession(b.ctx, b.alice, in)
		assert.Equal(t, fault.Policy, fault.KindOf(err), "%+v: %v", in, err)
	}
	_, err = b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{CPU: -1})
	assert.Equal(t, fault.Validation, fault.KindOf(err))
	list, _, err := b.Service.ListSessions(b.ctx, b.alice, sandbox.ListFilter{Limit: 10})
	require.NoError(t, err)
	assert.Len(t, list, 2, "refused requests made no session")
}

// EditSession renames and relabels (nil removes a label), sets the lifetime from now, and
// keeps another principal's session unknown.
func TestEditSession(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Name: "a", Labels: map[string]string{"team": "ml", "stage": "dev"}})
	require.NoError(t, err)
	name, owner := "b", "x"
	got, err := b.Service.EditSession(b.ctx, b.alice, sess.ID, "", sandbox.SessionEdit{Name: &name, Labels: map[string]*string{"stage": nil, "owner": &owner}})
	require.NoError(t, err)
	assert.Equal(t, "b", got.Name)
	assert.Equal(t, map[string]string{"team": "ml", "owner": "x"}, got.Labels)

	life := time.Hour
	got, err = b.Service.EditSession(b.ctx, b.alice, sess.ID, "", sandbox.SessionEdit{Lifetime: &life, ClearLabels: true})
	require.NoError(t, err)
	assert.True(t, sandboxtest.T0.Add(time.Hour).Equal(got.ExpiresAt), "%v", got.ExpiresAt)
	assert.Empty(t, got.Labels)
	assert.Equal(t, "b", got.Name, "kept")

	_, err = b.Service.EditSession(b.ctx, b.bob, sess.ID, "", sandbox.SessionEdit{Name: &name})
	assert.Equal(t, fault.NotFound, fault.KindOf(err))
	bad := "a\x00b"
	_, err = b.Service.EditSession(b.ctx, b.alice, sess.ID, "", sandbox.SessionEdit{Name: &bad})
	assert.Equal(t, fault.Validation, fault.KindOf(err))
	many := map[string]*string{}
	for i := range sandbox.MaxSessionLabels + 1 {
		v := "v"
		many[string(rune('a'+i%26))+string(rune('a'+i/26))] = &v
	}
	_, err = b.Service.EditSession(b.ctx, b.alice, sess.ID, "", sandbox.SessionEdit{Labels: many})
	assert.Equal(t, fault.Validation, fault.KindOf(err))
	zero := time.Duration(0)
	_, err = b.Service.EditSession(b.ctx, b.alice, "default", "", sandbox.SessionEdit{Lifetime: &zero})
	assert.Equal(t, fault.Conflict, fault.KindOf(err), "a default session has no lifetime: %v", err)
}
