package storetest

import (
	"crypto/sha256"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/store"
)

var apiKeyTests = []test{
	{"create_and_get", testAPIKeyCreateGet},
	{"list_own_and_all", testAPIKeyList},
	{"live_keys_quota", testAPIKeyQuota},
	{"revoke_once", testAPIKeyRevoke},
	{"delete_ended", testAPIKeyDeleteEnded},
	{"audit_carries_the_key", testAuditAPIKey},
}

// newKey is key id of owner, made at created, expiring ttl later.
func newKey(id, owner string, created time.Time, ttl time.Duration) store.APIKey {
	h := sha256.Sum256([]byte("secret of " + id))
	return store.APIKey{
		ID: id, PrincipalID: owner, Name: "key " + id, Prefix: "sgk_" + id, Hash: h[:],
		Issuer: "https://issuer.storetest.invalid", Subject: "s-" + id, CreatedAt: created, ExpiresAt: created.Add(ttl),
	}
}

func (f *fixture) key(k store.APIKey) store.APIKey {
	f.t.Helper()
	require.NoError(f.t, f.st.CreateAPIKeyWithin(f.ctx, k, 0), "create key %s", k.ID)
	return k
}

func keyIDs(rows []store.APIKey) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}

func testAPIKeyCreateGet(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	in := newKey("k01", alice, at(0), time.Hour)
	in.Username, in.Email, in.Groups = "al", "a@x", []string{"ml", "dev"}
	in.Credentials = store.KeyCredentials{KubernetesUser: "alice", KubernetesGroups: []string{"dev"}, AWSRoleARN: "arn:aws:iam::1:role/a", RunAs: "alice"}
	in.Profiles = []string{"default", "gpu"}
	f.key(in)

	got, err := f.st.GetAPIKey(f.ctx, "k01")
	require.NoError(t, err)
	require.Equal(t, alice, got.PrincipalID)
	require.Equal(t, "key k01", got.Name)
	require.Equal(t, "sgk_k01", got.Prefix)
	require.Equal(t, in.Hash, got.Hash)
	require.Equal(t, "https://issuer.storetest.invalid", got.Issuer)
	require.Equal(t, "s-k01", got.Subject)
	require.Equal(t, "al", got.Username)
	require.Equal(t, "a@x", got.Email)
	require.Equal(t, []string{"ml", "dev"}, got.Groups)
	require.Equal(t, in.Credentials, got.Credentials)
	require.Equal(t, []string{"default", "gpu"}, got.Profiles)
	sameTime(t, at(0), got.CreatedAt, "created_at")
	sameTime(t, at(time.Hour), got.ExpiresAt, "expires_at")
	require.Nil(t, got.LastUsedAt)
	require.Nil(t, got.RevokedAt)
	require.Empty(t, got.RevokedBy)

	f.key(newKey("k02", alice, at(0), time.Hour))
	plain, err := f.st.GetAPIKey(f.ctx, "k02")
	require.NoError(t, err)
	require.Nil(t, plain.Profiles, "no restriction stays no restriction (not an empty list)")
	require.NotNil(t, plain.Groups, "no groups: an empty list")
	require.Empty(t, plain.Groups)

	_, err = f.st.GetAPIKey(f.ctx, "k99")
	require.ErrorIs(t, err, store.ErrNotFound)

	dup := newKey("k03", alice, at(0), time.Hour)
	dup.Hash = in.Hash
	require.Error(t, f.st.CreateAPIKeyWithin(f.ctx, dup, 0), "one key per secret")
	require.Error(t, f.st.CreateAPIKeyWithin(f.ctx, newKey("k01", alice, at(0), time.Hour), 0), "duplicate id")
	require.Error(t, f.st.CreateAPIKeyWithin(f.ctx, newKey("k04", notAPrincipal, at(0), time.Hour), 0), "the principal must be recorded")
}

func testAPIKeyList(f *fixture) {
	t := f.t
	alice, bob := f.owner("alice"), f.owner("bob")
	f.key(newKey("k01", alice, at(0), time.Hour))
	f.key(newKey("k02", bob, at(time.Minute), time.Hour))
	f.key(newKey("k03", alice, at(2*time.Minute), time.Hour))
	f.key(newKey("k04", alice, at(2*time.Minute), time.Hour))
	list := func(fl store.APIKeyFilter) []string {
		t.Helper()
		if fl.Limit == 0 {
			fl.Limit = 10
		}
		rows, err := f.st.ListAPIKeys(f.ctx, fl)
		require.NoError(t, err)
		return keyIDs(rows)
	}
	require.Equal(t, []string{"k04", "k03", "k01"}, list(store.APIKeyFilter{OwnerID: alice}), "newest first, then by id")
	require.Equal(t, []string{"k02"}, list(store.APIKeyFilter{OwnerID: bob}))
	require.Equal(t, []string{"k04", "k03", "k02", "k01"}, list(store.APIKeyFilter{All: true}))
	require.Empty(t, list(store.APIKeyFilter{}), "nobody's keys")

	page := list(store.APIKeyFilter{OwnerID: alice, Limit: 2})
	require.Equal(t, []string{"k04", "k03"}, page)
	require.Equal(t, []string{"k01"}, list(store.APIKeyFilter{OwnerID: alice, Limit: 2, AfterCreated: at(2 * time.Minute), AfterID: "k03"}))
	_, err := f.st.ListAPIKeys(f.ctx, store.APIKeyFilter{OwnerID: alice})
	require.Error(t, err, "a limit is required")
}

func testAPIKeyQuota(f *fixture) {
	t := f.t
	alice, bob := f.owner("alice"), f.owner("bob")
	f.key(newKey("k01", alice, at(0), time.Hour))
	f.key(newKey("k02", alice, at(0), time.Minute)) // expired by the time k04 is made
	require.NoError(t, f.st.CreateAPIKeyWithin(f.ctx, newKey("k03", bob, at(0), time.Hour), 2), "bob's keys are his own")
	require.ErrorIs(t, f.st.CreateAPIKeyWithin(f.ctx, newKey("k04", alice, at(0), time.Hour), 2), store.ErrQuota)
	_, err := f.st.GetAPIKey(f.ctx, "k04")
	require.ErrorIs(t, err, store.ErrNotFound, "nothing inserted over the limit")

	require.NoError(t, f.st.CreateAPIKeyWithin(f.ctx, newKey("k04", alice, at(time.Minute), time.Hour), 2), "an expired key is not held")
	require.ErrorIs(t, f.st.CreateAPIKeyWithin(f.ctx, newKey("k05", alice, at(time.Minute), time.Hour), 2), store.ErrQuota)
	_, err = f.st.RevokeAPIKey(f.ctx, "k01", alice, at(time.Minute))
	require.NoError(t, err)
	require.NoError(t, f.st.CreateAPIKeyWithin(f.ctx, newKey("k05", alice, at(time.Minute), time.Hour), 2), "a revoked key is not held")
}

func testAPIKeyRevoke(f *fixture) {
	t := f.t
	alice, admin := f.owner("alice"), f.owner("admin")
	f.key(newKey("k01", alice, at(0), time.Hour))
	k, err := f.st.RevokeAPIKey(f.ctx, "k01", admin, at(time.Minute))
	require.NoError(t, err)
	require.Equal(t, "k01", k.ID)
	sameTimePtr(t, at(time.Minute), k.RevokedAt, "revoked_at")
	require.Equal(t, admin, k.RevokedBy)

	again, err := f.st.RevokeAPIKey(f.ctx, "k01", alice, at(2*time.Minute))
	require.NoError(t, err)
	sameTimePtr(t, at(time.Minute), again.RevokedAt, "the first revocation stays")
	require.Equal(t, admin, again.RevokedBy)
	got, err := f.st.GetAPIKey(f.ctx, "k01")
	require.NoError(t, err)
	sameTimePtr(t, at(time.Minute), got.RevokedAt, "revoked_at")

	_, err = f.st.RevokeAPIKey(f.ctx, "k99", alice, at(0))
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testAPIKeyDeleteEnded(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.key(newKey("expired", alice, at(-48*time.Hour), time.Hour))
	f.key(newKey("revoked", alice, at(-48*time.Hour), 96*time.Hour))
	f.key(newKey("recently", alice, at(-48*time.Hour), 96*time.Hour))
	f.key(newKey("live", alice, at(-48*time.Hour), 96*time.Hour))
	_, err := f.st.RevokeAPIKey(f.ctx, "revoked", alice, at(-47*time.Hour))
	require.NoError(t, err)
	_, err = f.st.RevokeAPIKey(f.ctx, "recently", alice, at(-time.Hour))
	require.NoError(t, err)

	n, err := f.st.DeleteEndedAPIKeys(f.ctx, at(-24*time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	rows, err := f.st.ListAPIKeys(f.ctx, store.APIKeyFilter{All: true, Limit: 10})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"recently", "live"}, keyIDs(rows))
}

func testAuditAPIKey(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	f.session(newSession("s01", alice, at(0)))
	with := newTask("t01", alice, "s01", "r1", at(0))
	with.APIKeyID = "k01"
	f.task(with)
	begun := newTask("t02", alice, "s01", "r1", at(time.Minute))
	begun.APIKeyID = "k01"
	b, err := f.st.BeginTask(f.ctx, begun, store.Admission{Lock: true})
	require.NoError(t, err)
	f.st.ReleaseTurn(b.Place)
	f.task(newTask("t03", alice, "s01", "r1", at(2*time.Minute)))
	require.NoError(t, f.st.AppendAudit(f.ctx, store.AuditEvent{At: at(3 * time.Minute), Kind: store.AuditFileWrite, PrincipalID: alice, SessionID: "s01", Target: "a", APIKeyID: "k01"}))
	require.NoError(t, f.st.AppendAudit(f.ctx, store.AuditEvent{At: at(4 * time.Minute), Kind: store.AuditAPIKeyRevoke, PrincipalID: alice, Target: "k01"}))

	require.Equal(t, "k01", f.auditOf("t01").APIKeyID)
	require.Equal(t, "k01", f.auditOf("t02").APIKeyID)
	require.Empty(t, f.auditOf("t03").APIKeyID, "an execution submitted with a token")
	var got []string
	for _, e := range f.audit(store.AuditFilter{APIKeyID: "k01"}) {
		got = append(got, e.Kind+"/"+e.TaskID+e.Target)
	}
	require.Equal(t, []string{"file_write/a", "execution/t02", "execution/t01"}, got, "the events made with the key")
	rows := f.audit(store.AuditFilter{Kind: store.AuditAPIKeyRevoke})
	require.Len(t, rows, 1)
	require.Equal(t, "k01", rows[0].Target)
	require.Empty(t, rows[0].APIKeyID)
}
