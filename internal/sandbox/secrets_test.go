package sandbox_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
	"github.com/sandgate/sandgate/internal/sandbox/secret"
	"github.com/sandgate/sandgate/internal/store"
)

// testKeys is a keyring of fresh keys named ids, the first sealing.
func testKeys(t *testing.T, ids ...string) (*secret.Keyring, []string) {
	t.Helper()
	var specs []string
	for _, id := range ids {
		var k [secret.KeyBytes]byte
		_, _ = rand.Read(k[:])
		specs = append(specs, id+":"+base64.StdEncoding.EncodeToString(k[:]))
	}
	ring, err := secret.ParseKeys(specs)
	require.NoError(t, err)
	return ring, specs
}

func lastCall(t *testing.T, prov *sandboxtest.Provider, op string) sandboxtest.Call {
	t.Helper()
	calls := prov.Calls()
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].Op == op {
			return calls[i]
		}
	}
	t.Fatalf("no %s call", op)
	return sandboxtest.Call{}
}

// A session binds its principal's secrets by name: its sandbox is created and attached (after
// a gateway restart too) with the value and hosts for the egress proxy, while every program
// gets only the placeholder in SANDGATE_SECRET_<NAME>. Values never reach the store in the
// clear, the session's view, or the audit log.
func TestSessionSecrets(t *testing.T) {
	t.Parallel()
	ring, _ := testKeys(t, "k1")
	b := setup(t, sandboxtest.Options{SecretKeys: ring})
	prov := b.Provider(t, "default")
	value := []byte("sk-live-0123456789abcdef")

	s, created, err := b.Service.SetSecret(b.ctx, b.alice, "openai", value, []string{"API.openai.com", "*.openai.com:443"})
	require.NoError(t, err)
	assert.True(t, created)
	assert.Equal(t, []string{"*.openai.com:443", "api.openai.com"}, s.Hosts, "lower-cased and sorted")
	_, created, err = b.Service.SetSecret(b.ctx, b.alice, "gh-token", []byte("ghp_secretvalue"), []string{"api.github.com"})
	require.NoError(t, err)
	assert.True(t, created)

	row, err := b.Store.GetSecret(b.ctx, b.alice.ID, "openai")
	require.NoError(t, err)
	assert.Equal(t, "k1", row.KeyID)
	assert.False(t, bytes.Contains(row.Sealed, value), "sealed at rest")

	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Secrets: []string{"openai", "gh-token"}, Env: map[string]string{"A": "1"}})
	require.NoError(t, err)
	require.Len(t, sess.Secrets, 2)
	ph := sess.Secrets["openai"]
	assert.True(t, strings.HasPrefix(ph, secret.PlaceholderPrefix), ph)
	assert.NotEqual(t, ph, sess.Secrets["gh-token"])

	b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "print(1)", Env: map[string]string{"SANDGATE_SECRET_OPENAI": "override"}})
	execs := prov.Execs()
	require.Len(t, execs, 1)
	assert.Equal(t, map[string]string{"A": "1", "SANDGATE_SECRET_OPENAI": ph, "SANDGATE_SECRET_GH_TOKEN": sess.Secrets["gh-token"]}, execs[0].Spec.Env,
		"the placeholders, never the values, and nothing overrides them")

	create := lastCall(t, prov, "create")
	require.Len(t, create.Policy.Secrets, 2)
	byName := map[string]providers.SecretBinding{}
	for _, bnd := range create.Policy.Secrets {
		byName[bnd.Name] = bnd
	}
	assert.Equal(t, providers.SecretBinding{Name: "openai", EnvName: "SANDGATE_SECRET_OPENAI", Placeholder: ph, Value: value, Hosts: []string{"*.openai.com:443", "api.openai.com"}}, byName["openai"])
	assert.Equal(t, "SANDGATE_SECRET_GH_TOKEN", byName["gh-token"].EnvName)

	// Another replica (a restart): the sandbox is attached with the same placeholder.
	other := sandboxtest.New(t, sandboxtest.Options{Store: b.Store, SecretKeys: ring, RunnerID: "runner-2"})
	_, err = other.Service.Execute(b.ctx, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "print(2)"})
	require.NoError(t, err)
	attach := lastCall(t, other.Provider(t, "default"), "attach")
	require.Len(t, attach.Policy.Secrets, 2)
	for _, bnd := range attach.Policy.Secrets {
		assert.Equal(t, sess.Secrets[bnd.Name], bnd.Placeholder)
	}

	// The store keeps the placeholder with the session, and the audit log names, never values.
	got, err := b.Store.GetSession(b.ctx, sess.ID)
	require.NoError(t, err)
	assert.Equal(t, sess.Secrets, got.Secrets)
	events, err := b.Store.ListAudit(b.ctx, store.AuditFilter{Limit: 100})
	require.NoError(t, err)
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, e.Kind+":"+e.Target)
		for _, field := range []string{e.Target, e.Excerpt, e.Digest} {
			assert.NotContains(t, field, string(value))
		}
	}
	assert.Contains(t, kinds, "secret_set:openai")

	list, err := b.Service.ListSecrets(b.ctx, b.alice)
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, "gh-token", list[0].Name)
	bobs, err := b.Service.ListSecrets(b.ctx, b.bob)
	require.NoError(t, err)
	assert.Empty(t, bobs)

	// Bob cannot bind, nor delete, alice's secret.
	_, err = b.Service.CreateSession(b.ctx, b.bob, sandbox.CreateSessionInput{Secrets: []string{"openai"}})
	assert.Equal(t, fault.NotFound, fault.KindOf(err), "%v", err)
	assert.Contains(t, err.Error(), "openai")
	assert.Equal(t, fault.NotFound, fault.KindOf(b.Service.DeleteSecret(b.ctx, b.bob, "openai")))

	require.NoError(t, b.Service.DeleteSecret(b.ctx, b.alice, "openai"))
	assert.Equal(t, fault.NotFound, fault.KindOf(b.Service.DeleteSecret(b.ctx, b.alice, "openai")))
	events, err = b.Store.ListAudit(b.ctx, store.AuditFilter{Kind: store.AuditSecretDelete, Limit: 10})
	require.NoError(t, err)
	require.Len(t, events, 1)
	assert.Equal(t, "openai", events[0].Target)
}

// What a secret and a session's secrets may be; refusals make nothing.
func TestSecretRefusals(t *testing.T) {
	t.Parallel()
	ring, _ := testKeys(t, "k1")
	b := setup(t, sandboxtest.Options{SecretKeys: ring})
	ok := []string{"api.example.com"}
	for _, tc := range []struct {
		name  string
		value string
		hosts []string
		kind  fault.Kind
	}{
		{"Upper", "v", ok, fault.Validation},
		{"1st", "v", ok, fault.Validation},
		{"a b", "v", ok, fault.Validation},
		{strings.Repeat("a", 64), "v", ok, fault.Validation},
		{"nohosts", "v", nil, fault.Validation},
		{"empty", "", ok, fault.Validation},
		{"large", strings.Repeat("x", secret.MaxValueBytes+1), ok, fault.TooLarge},
		{"scheme", "v", []string{"https://api.example.com"}, fault.Validation},
		{"path", "v", []string{"api.example.com/v1"}, fault.Validation},
		{"cidr", "v", []string{"10.0.0.0/8"}, fault.Validation},
		{"port", "v", []string{"api.example.com:0"}, fault.Validation},
		{"wild", "v", []string{"*.com"}, fault.Validation},
		{"midwild", "v", []string{"a.*.example.com"}, fault.Validation},
	} {
		_, _, err := b.Service.SetSecret(b.ctx, b.alice, tc.name, []byte(tc.value), tc.hosts)
		assert.Equal(t, tc.kind, fault.KindOf(err), "%s %v: %v", tc.name, tc.hosts, err)
	}
	_, _, err := b.Service.SetSecret(b.ctx, b.alice, "ip", []byte("v"), []string{"10.1.2.3:8443", "[::1]:443"})
	require.NoError(t, err)
	list, err := b.Service.ListSecrets(b.ctx, b.alice)
	require.NoError(t, err)
	assert.Len(t, list, 1, "refusals made nothing")

	_, _, err = b.Service.SetSecret(b.ctx, b.alice, "a-b", []byte("v"), ok)
	require.NoError(t, err)
	_, _, err = b.Service.SetSecret(b.ctx, b.alice, "a_b", []byte("v"), ok)
	require.NoError(t, err)
	for _, names := range [][]string{{"nosuch"}, {"ip", "ip"}, {"a-b", "a_b"}, {"BAD"}} {
		_, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Secrets: names})
		require.Error(t, err, "%v", names)
		assert.Contains(t, []fault.Kind{fault.NotFound, fault.Validation}, fault.KindOf(err), "%v: %v", names, err)
	}
	sessions, _, err := b.Service.ListSessions(b.ctx, b.alice, sandbox.ListFilter{Limit: 10})
	require.NoError(t, err)
	assert.Empty(t, sessions, "refused requests made no session")

	// No key configured: secrets are refused, naming the setting; sessions without them work.
	off := setup(t, sandboxtest.Options{})
	_, _, err = off.Service.SetSecret(off.ctx, off.alice, "openai", []byte("v"), ok)
	assert.Equal(t, fault.Config, fault.KindOf(err))
	assert.Contains(t, err.Error(), "secrets.keys")
	_, err = off.Service.CreateSession(off.ctx, off.alice, sandbox.CreateSessionInput{Secrets: []string{"openai"}})
	assert.Equal(t, fault.Config, fault.KindOf(err))
	_, err = off.Service.CreateSession(off.ctx, off.alice, sandbox.CreateSessionInput{})
	require.NoError(t, err)
}

// A profile's own secrets (an operator's) are bound to every session of it — default and
// per_call ones too — and a principal cannot name them again.
func TestProfileSecrets(t *testing.T) {
	t.Parallel()
	ops := []providers.SecretBinding{{Name: "pypi", Hosts: []string{"upload.pypi.org"}, Value: []byte("pypi-operator-token")}}
	def := sandboxtest.Profile("default", sandbox.ScopePerSession, nil)
	def.Secrets = ops
	once := sandboxtest.Profile("oneshot", sandbox.ScopePerCall, nil)
	once.Secrets = ops
	b := setup(t, sandboxtest.Options{Profiles: []sandbox.ProfileSpec{def, once}})
	prov := b.Provider(t, "default")

	b.exec(t, b.alice, sandbox.ExecInput{Code: "print(1)"}) // the default session
	execs := prov.Execs()
	require.Len(t, execs, 1)
	ph := execs[0].Spec.Env["SANDGATE_SECRET_PYPI"]
	assert.True(t, strings.HasPrefix(ph, secret.PlaceholderPrefix), ph)
	create := lastCall(t, prov, "create")
	require.Len(t, create.Policy.Secrets, 1)
	assert.Equal(t, []byte("pypi-operator-token"), create.Policy.Secrets[0].Value)
	assert.Equal(t, ph, create.Policy.Secrets[0].Placeholder)

	b.run(t, b.alice, sandbox.ExecInput{Profile: "oneshot", Code: "print(1)"})
	onceExecs := b.Provider(t, "oneshot").Execs()
	require.Len(t, onceExecs, 1)
	assert.True(t, strings.HasPrefix(onceExecs[0].Spec.Env["SANDGATE_SECRET_PYPI"], secret.PlaceholderPrefix))

	_, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Secrets: []string{"pypi"}})
	assert.Equal(t, fault.Validation, fault.KindOf(err), "%v", err)
}

// Rotation: with a new key first, secrets sealed under the old one still open; Reseal moves
// them to the new key, after which the old key can go.
func TestSecretRotation(t *testing.T) {
	t.Parallel()
	old, oldSpecs := testKeys(t, "old")
	b := setup(t, sandboxtest.Options{SecretKeys: old})
	_, _, err := b.Service.SetSecret(b.ctx, b.alice, "openai", []byte("value-1"), []string{"api.openai.com"})
	require.NoError(t, err)

	_, newSpecs := testKeys(t, "new")
	both, err := secret.ParseKeys(append(newSpecs, oldSpecs...))
	require.NoError(t, err)
	rotated := sandboxtest.New(t, sandboxtest.Options{Store: b.Store, SecretKeys: both, RunnerID: "runner-2"})
	n, err := rotated.Service.ResealSecrets(b.ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	row, err := b.Store.GetSecret(b.ctx, b.alice.ID, "openai")
	require.NoError(t, err)
	assert.Equal(t, "new", row.KeyID)

	only, err := secret.ParseKeys(newSpecs)
	require.NoError(t, err)
	v, err := only.Open(row.KeyID, b.alice.ID, "openai", row.Sealed)
	require.NoError(t, err)
	assert.Equal(t, []byte("value-1"), v)
	_, err = only.Open(row.KeyID, b.bob.ID, "openai", row.Sealed)
	assert.Error(t, err, "bound to its owner")
	_, err = old.Open(row.KeyID, b.alice.ID, "openai", row.Sealed)
	assert.Equal(t, fault.Config, fault.KindOf(err), "the old ring lacks the new key")
}

// Defence in depth: a value that comes back in a program's output (an upstream echoing it) is
// kept, in the task's result, as "[secret NAME]".
func TestSecretRedactedFromOutput(t *testing.T) {
	t.Parallel()
	ring, _ := testKeys(t, "k1")
	b := setup(t, sandboxtest.Options{SecretKeys: ring})
	_, _, err := b.Service.SetSecret(b.ctx, b.alice, "openai", []byte("sk-echoed-value"), []string{"api.openai.com"})
	require.NoError(t, err)
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Secrets: []string{"openai"}})
	require.NoError(t, err)
	b.Provider(t, "default").SetProgram(sandboxtest.Reply(0, "got sk-echoed-value back\n", "err: sk-echoed-value\n"))
	res := b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "print(1)"})
	assert.Equal(t, "got [secret openai] back\n", res.Stdout)
	assert.Equal(t, "err: [secret openai]\n", res.Stderr)
	task, err := b.Store.GetTask(b.ctx, res.TaskID, b.alice.ID)
	require.NoError(t, err)
	assert.NotContains(t, string(task.Result), "sk-echoed-value", "the stored result too")

	plain, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{})
	require.NoError(t, err)
	res = b.exec(t, b.alice, sandbox.ExecInput{SessionID: plain.ID, Code: "print(1)"})
	assert.Equal(t, "got sk-echoed-value back\n", res.Stdout, "a session without the secret is not rewritten")
}
