package sandbox_test

import (
	"encoding/hex"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/apikey"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
	"github.com/sandgate/sandgate/internal/store"
)

// viaKey is p as a request with API key id, restricted to profiles (nil: none), arrives:
// the claims the key was made with, its id and restriction.
func viaKey(p principal.Principal, id string, profiles ...string) principal.Principal {
	p.APIKeyID, p.KeyProfiles = id, profiles
	return p
}

// revocations records what the service reports revoked.
type revocations struct {
	mu  sync.Mutex
	ids []string
}

func (r *revocations) add(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, id)
}

func (r *revocations) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

func keyIDs(keys []sandbox.APIKey) []string {
	out := []string{}
	for _, k := range keys {
		out = append(out, k.ID)
	}
	return out
}

func TestAPIKeyCreateListRevoke(t *testing.T) {
	t.Parallel()
	var revoked revocations
	var made []string // hex SHA-256 of the secrets made, as KeyCreated heard them
	var madeMu sync.Mutex
	b := setup(t, sandboxtest.Options{KeyRevoked: revoked.add, KeyCreated: func(h [32]byte) {
		madeMu.Lock()
		defer madeMu.Unlock()
		made = append(made, hex.EncodeToString(h[:]))
	}})
	admin := b.Principal(t, "root", "admins")
	admin.Admin = true

	k, err := b.Service.CreateAPIKey(b.ctx, b.alice, sandbox.NewAPIKeyInput{Name: "  ci deploy "})
	require.NoError(t, err)
	parsed, err := apikey.Parse(k.Secret)
	require.NoError(t, err, "the secret is a well-formed key")
	madeMu.Lock()
	require.Equal(t, []string{hex.EncodeToString(parsed.Hash[:])}, made, "the authentication is told of the key before its secret is answered")
	madeMu.Unlock()
	require.Equal(t, parsed.Display, k.Prefix)
	require.Equal(t, "ci deploy", k.Name, "trimmed")
	require.Equal(t, b.alice.ID, k.PrincipalID)
	require.Equal(t, sandboxtest.Issuer+"#alice", k.Principal)
	require.Equal(t, sandbox.KeyActive, k.Status)
	require.Nil(t, k.Profiles)
	require.True(t, sandboxtest.T0.Equal(k.CreatedAt))
	require.True(t, sandboxtest.T0.Add(30*24*time.Hour).Equal(k.ExpiresAt), "the default lifetime")

	row, err := b.Store.GetAPIKey(b.ctx, k.ID)
	require.NoError(t, err)
	require.Equal(t, parsed.Hash[:], row.Hash, "the store keeps the hash")
	require.Equal(t, []string{}, row.Groups)

	b.Clock.Advance(time.Second)
	k2, err := b.Service.CreateAPIKey(b.ctx, b.alice, sandbox.NewAPIKeyInput{Name: "laptop", TTL: time.Hour, Profiles: []string{"default", "default"}})
	require.NoError(t, err)
	require.Equal(t, []string{"default"}, k2.Profiles, "duplicates dropped")
	require.True(t, b.Clock.Now().Add(time.Hour).Equal(k2.ExpiresAt))
	bobs, err := b.Service.CreateAPIKey(b.ctx, b.bob, sandbox.NewAPIKeyInput{Name: "bob's"})
	require.NoError(t, err)

	list, next, err := b.Service.ListAPIKeys(b.ctx, b.alice, sandbox.APIKeyFilter{})
	require.NoError(t, err)
	require.Empty(t, next)
	require.Equal(t, []string{k2.ID, k.ID}, keyIDs(list), "newest first, her own")
	page, next, err := b.Service.ListAPIKeys(b.ctx, b.alice, sandbox.APIKeyFilter{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []string{k2.ID}, keyIDs(page))
	page, next, err = b.Service.ListAPIKeys(b.ctx, b.alice, sandbox.APIKeyFilter{Limit: 1, Cursor: next})
	require.NoError(t, err)
	require.Equal(t, []string{k.ID}, keyIDs(page))
	require.Empty(t, next)

	// Another principal's key does not exist for bob; the administrator sees and revokes it.
	_, err = b.Service.GetAPIKey(b.ctx, b.bob, k.ID)
	requireKind(t, err, fault.NotFound)
	_, err = b.Service.RevokeAPIKey(b.ctx, b.bob, k.ID)
	requireKind(t, err, fault.NotFound)
	_, err = b.Service.GetAPIKey(b.ctx, b.bob, "0123456789abcdef0123456789abcdef")
	requireKind(t, err, fault.NotFound)
	_, _, err = b.Service.ListAPIKeys(b.ctx, b.bob, sandbox.APIKeyFilter{All: true})
	requireKind(t, err, fault.Forbidden)
	all, _, err := b.Service.ListAPIKeys(b.ctx, admin, sandbox.APIKeyFilter{All: true})
	require.NoError(t, err)
	require.Equal(t, []string{bobs.ID, k2.ID, k.ID}, keyIDs(all))
	gone, err := b.Service.RevokeAPIKey(b.ctx, admin, bobs.ID)
	require.NoError(t, err)
	require.Equal(t, sandbox.KeyRevoked, gone.Status)

	r, err := b.Service.RevokeAPIKey(b.ctx, b.alice, k.ID)
	require.NoError(t, err)
	require.Equal(t, sandbox.KeyRevoked, r.Status)
	require.True(t, b.Clock.Now().Equal(*r.RevokedAt))
	b.Clock.Advance(time.Minute)
	again, err := b.Service.RevokeAPIKey(b.ctx, b.alice, k.ID)
	require.NoError(t, err, "revoking twice is no error")
	require.True(t, r.RevokedAt.Equal(*again.RevokedAt), "the first revocation stays")
	require.Equal(t, []string{bobs.ID, k.ID}, revoked.list(), "each revocation told once")

	b.Clock.Advance(time.Hour)
	got, err := b.Service.GetAPIKey(b.ctx, b.alice, k2.ID)
	require.NoError(t, err)
	require.Equal(t, sandbox.KeyExpired, got.Status)

	// Audited: who made and revoked which key.
	events, _, err := b.Service.Audit(b.ctx, admin, sandbox.AuditQuery{Limit: 50})
	require.NoError(t, err)
	var seen []string
	for _, e := range events {
		if strings.HasPrefix(e.Kind, "api_key_") {
			seen = append(seen, e.Kind+" "+e.Target+" by "+e.Principal)
		}
	}
	require.Equal(t, []string{
		"api_key_revoke " + k.ID + " by " + sandboxtest.Issuer + "#alice",
		"api_key_revoke " + bobs.ID + " by " + sandboxtest.Issuer + "#root",
		"api_key_create " + bobs.ID + " by " + sandboxtest.Issuer + "#bob",
		"api_key_create " + k2.ID + " by " + sandboxtest.Issuer + "#alice",
		"api_key_create " + k.ID + " by " + sandboxtest.Issuer + "#alice",
	}, seen)

	// Ended keys are deleted by the sweeper once APIKeyRetention has passed.
	b.Clock.Advance(sandbox.APIKeyRetention)
	b.Service.SweepNow(b.ctx)
	all, _, err = b.Service.ListAPIKeys(b.ctx, admin, sandbox.APIKeyFilter{All: true})
	require.NoError(t, err)
	require.Empty(t, all)
}

// TestAPIKeyCannotMintKeys: only a sign-in makes keys, and acts on other principals' keys.
func TestAPIKeyCannotMintKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	own, err := b.Service.CreateAPIKey(b.ctx, b.alice, sandbox.NewAPIKeyInput{Name: "ci"})
	require.NoError(t, err)
	key := viaKey(b.alice, own.ID)

	_, err = b.Service.CreateAPIKey(b.ctx, key, sandbox.NewAPIKeyInput{Name: "successor"})
	requireKind(t, err, fault.Forbidden)
	require.Contains(t, err.Error(), "sign in")

	list, _, err := b.Service.ListAPIKeys(b.ctx, key, sandbox.APIKeyFilter{})
	require.NoError(t, err, "a key lists its maker's keys")
	require.Equal(t, []string{own.ID}, keyIDs(list))

	admin := b.Principal(t, "root", "admins")
	admin.Admin = true
	bobs, err := b.Service.CreateAPIKey(b.ctx, b.bob, sandbox.NewAPIKeyInput{Name: "bob's"})
	require.NoError(t, err)
	adminKey := viaKey(admin, "k-admin")
	_, _, err = b.Service.ListAPIKeys(b.ctx, adminKey, sandbox.APIKeyFilter{All: true})
	requireKind(t, err, fault.Forbidden)
	require.Contains(t, err.Error(), "sign in")
	_, err = b.Service.RevokeAPIKey(b.ctx, adminKey, bobs.ID)
	requireKind(t, err, fault.Forbidden)

	r, err := b.Service.RevokeAPIKey(b.ctx, key, own.ID)
	require.NoError(t, err, "a key may revoke itself")
	require.Equal(t, sandbox.KeyRevoked, r.Status)
}

func TestAPIKeyInputChecked(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{Settings: sandbox.Settings{APIKeys: sandbox.APIKeySettings{MaxTTL: 48 * time.Hour}}})
	carol := b.Principal(t, "carol", "gpu")
	for name, in := range map[string]sandbox.NewAPIKeyInput{
		"no name":         {Name: "  "},
		"long name":       {Name: strings.Repeat("é", 101)},
		"control":         {Name: "a\nb"},
		"short lifetime":  {Name: "k", TTL: 59 * time.Second},
		"long lifetime":   {Name: "k", TTL: 48*time.Hour + time.Second},
		"no profiles":     {Name: "k", Profiles: []string{}},
		"a blank profile": {Name: "k", Profiles: []string{""}},
	} {
		_, err := b.Service.CreateAPIKey(b.ctx, b.alice, in)
		requireKind(t, err, fault.Validation)
		require.NotEmpty(t, name)
	}
	_, err := b.Service.CreateAPIKey(b.ctx, b.alice, sandbox.NewAPIKeyInput{Name: "k", TTL: 49 * time.Hour})
	require.ErrorContains(t, err, "between 60 and 172800 seconds")
	_, err = b.Service.CreateAPIKey(b.ctx, b.alice, sandbox.NewAPIKeyInput{Name: "k", Profiles: []string{"nope"}})
	requireKind(t, err, fault.Config)
	_, err = b.Service.CreateAPIKey(b.ctx, b.alice, sandbox.NewAPIKeyInput{Name: "k", Profiles: []string{"default", "gpu"}})
	requireKind(t, err, fault.Forbidden)
	require.Contains(t, err.Error(), "'gpu'", "each profile must be one the maker may use")

	k, err := b.Service.CreateAPIKey(b.ctx, carol, sandbox.NewAPIKeyInput{Name: strings.Repeat("é", 100), Profiles: []string{"gpu"}})
	require.NoError(t, err)
	require.True(t, b.Clock.Now().Add(48*time.Hour).Equal(k.ExpiresAt), "the default lifetime is at most the max")
	require.Equal(t, []string{"gpu"}, k.Profiles)
}

func TestAPIKeyLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{Settings: sandbox.Settings{APIKeys: sandbox.APIKeySettings{MaxPerPrincipal: 2}}})
	first, err := b.Service.CreateAPIKey(b.ctx, b.alice, sandbox.NewAPIKeyInput{Name: "a"})
	require.NoError(t, err)
	_, err = b.Service.CreateAPIKey(b.ctx, b.alice, sandbox.NewAPIKeyInput{Name: "b"})
	require.NoError(t, err)
	_, err = b.Service.CreateAPIKey(b.ctx, b.alice, sandbox.NewAPIKeyInput{Name: "c"})
	requireKind(t, err, fault.Quota)
	require.Contains(t, err.Error(), "auth.api_keys.max_per_principal")
	_, err = b.Service.CreateAPIKey(b.ctx, b.bob, sandbox.NewAPIKeyInput{Name: "c"})
	require.NoError(t, err, "per principal")
	_, err = b.Service.RevokeAPIKey(b.ctx, b.alice, first.ID)
	require.NoError(t, err)
	_, err = b.Service.CreateAPIKey(b.ctx, b.alice, sandbox.NewAPIKeyInput{Name: "c"})
	require.NoError(t, err, "a revoked key no longer counts")
}

// TestAPIKeyProfileRestriction: a key restricted to profiles reaches nothing of any other —
// not the profile, nor the principal's sessions, tasks and snapshots in it.
func TestAPIKeyProfileRestriction(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	carol := b.Principal(t, "carol", "gpu")
	key := viaKey(carol, "k1", "default")

	var names []string
	for _, p := range b.Service.Profiles(key) {
		names = append(names, p.Name)
	}
	require.Equal(t, []string{"default"}, names, "the key's profiles only")
	admin := b.Principal(t, "root", "admins")
	admin.Admin = true
	names = nil
	for _, p := range b.Service.Profiles(viaKey(admin, "k2", "gpu")) {
		names = append(names, p.Name)
	}
	require.Equal(t, []string{"gpu"}, names, "an administrator's key is restricted too")

	// Made with her sign-in: a session and a finished task in gpu.
	sess, err := b.Service.CreateSession(b.ctx, carol, sandbox.CreateSessionInput{Profile: "gpu"})
	require.NoError(t, err)
	res := b.exec(t, carol, sandbox.ExecInput{SessionID: sess.ID, Code: "print(1)"})
	gpuTask := res.TaskID

	forbidden := func(err error) {
		t.Helper()
		requireKind(t, err, fault.Forbidden)
		require.Contains(t, err.Error(), "this API key may use only the profiles ['default'], not 'gpu'")
	}
	_, err = b.Service.CreateSession(b.ctx, key, sandbox.CreateSessionInput{Profile: "gpu"})
	forbidden(err)
	_, err = b.Service.Execute(b.ctx, key, sandbox.ExecInput{SessionID: sandbox.DefaultSessionID, Profile: "gpu", Code: "x"})
	forbidden(err)
	_, err = b.Service.GetSession(b.ctx, key, sess.ID, "")
	forbidden(err)
	_, err = b.Service.Execute(b.ctx, key, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
	forbidden(err)
	_, err = b.Service.DestroySession(b.ctx, key, sess.ID, "")
	forbidden(err)
	_, err = b.Service.GetTask(b.ctx, key, gpuTask)
	forbidden(err)
	_, err = b.Service.Run(b.ctx, key, sandbox.ExecInput{Profile: "oneshot", Code: "x"})
	requireKind(t, err, fault.Forbidden)
	_, err = b.Service.Execute(b.ctx, key, sandbox.ExecInput{SessionID: sandbox.DefaultSessionID, Profile: "nope", Code: "x"})
	requireKind(t, err, fault.Config)
	require.Contains(t, err.Error(), "configured profiles: [default]", "only the key's profiles are named")

	// Its own profile works as for a sign-in, and what it does is audited with its id.
	r := b.exec(t, key, sandbox.ExecInput{SessionID: sandbox.DefaultSessionID, Code: "print(2)"})
	events, _, err := b.Service.Audit(b.ctx, admin, sandbox.AuditQuery{Limit: 50, APIKeyID: "k1"})
	require.NoError(t, err)
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, e.Kind+"/"+e.TaskID)
		require.Equal(t, "k1", e.APIKeyID)
		require.Equal(t, carol.ID, e.PrincipalID)
	}
	require.Equal(t, []string{"execution/" + r.TaskID, "session_create/"}, kinds)
}

// TestAPIKeyPrincipalKeepsItsClaims: a request with a key records the principal as seen,
// without making the key's claims (its maker's at the time) the principal's latest.
func TestAPIKeyPrincipalKeepsItsClaims(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	old := b.alice
	old.Groups = []string{"gpu"}
	b.Clock.Advance(2 * time.Minute)
	fresh := b.Principal(t, "alice", "dev")
	b.Clock.Advance(2 * time.Minute)
	seen, err := b.Service.Identify(b.ctx, viaKey(old, "k1"))
	require.NoError(t, err)
	require.Equal(t, fresh.ID, seen.ID)
	require.Equal(t, []string{"gpu"}, seen.Groups, "the request keeps the key's claims")
	row, err := b.Store.GetPrincipal(b.ctx, fresh.ID)
	require.NoError(t, err)
	require.Equal(t, []string{"dev"}, row.Groups, "the recorded claims stay the latest token's")
	require.True(t, b.Clock.Now().Equal(row.LastSeenAt), "seen now")
	require.Equal(t, store.Principal{}.Email, row.Email)
}
