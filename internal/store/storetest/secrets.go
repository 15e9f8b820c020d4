package storetest

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/store"
)

var secretTests = []test{
	{"put_get_replace", testSecretPutGetReplace},
	{"list_own_by_name", testSecretList},
	{"quota_counts_new_names", testSecretQuota},
	{"delete", testSecretDelete},
	{"reseal", testSecretReseal},
	{"session_keeps_placeholders", testSessionSecrets},
}

func newSecret(owner, name string, at time.Time) store.Secret {
	return store.Secret{OwnerID: owner, Name: name, Hosts: []string{name + ".example.com"}, KeyID: "k1", Sealed: []byte("sealed " + name), UpdatedAt: at}
}

func testSecretPutGetReplace(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	created, err := f.st.PutSecretWithin(f.ctx, newSecret(alice, "openai", at(0)), 0)
	require.NoError(t, err)
	require.True(t, created)
	got, err := f.st.GetSecret(f.ctx, alice, "openai")
	require.NoError(t, err)
	require.Equal(t, alice, got.OwnerID)
	require.Equal(t, []string{"openai.example.com"}, got.Hosts)
	require.Equal(t, "k1", got.KeyID)
	require.Equal(t, []byte("sealed openai"), got.Sealed)
	require.True(t, got.CreatedAt.Equal(at(0)))
	require.True(t, got.UpdatedAt.Equal(at(0)))

	again := newSecret(alice, "openai", at(time.Hour))
	again.Hosts, again.KeyID, again.Sealed = []string{"api.openai.com", "*.openai.com"}, "k2", []byte("new")
	created, err = f.st.PutSecretWithin(f.ctx, again, 0)
	require.NoError(t, err)
	require.False(t, created, "the same name replaces")
	got, err = f.st.GetSecret(f.ctx, alice, "openai")
	require.NoError(t, err)
	require.Equal(t, []string{"api.openai.com", "*.openai.com"}, got.Hosts)
	require.Equal(t, "k2", got.KeyID)
	require.Equal(t, []byte("new"), got.Sealed)
	require.True(t, got.CreatedAt.Equal(at(0)), "the created time stays")
	require.True(t, got.UpdatedAt.Equal(at(time.Hour)))

	bob := f.owner("bob")
	_, err = f.st.GetSecret(f.ctx, bob, "openai")
	require.ErrorIs(t, err, store.ErrNotFound, "another principal's secret is not found")
}

func testSecretList(f *fixture) {
	t := f.t
	alice, bob := f.owner("alice"), f.owner("bob")
	for _, n := range []string{"zeta", "alpha", "mid"} {
		_, err := f.st.PutSecretWithin(f.ctx, newSecret(alice, n, at(0)), 0)
		require.NoError(t, err)
	}
	_, err := f.st.PutSecretWithin(f.ctx, newSecret(bob, "bobs", at(0)), 0)
	require.NoError(t, err)
	rows, err := f.st.ListSecrets(f.ctx, alice)
	require.NoError(t, err)
	var names []string
	for _, r := range rows {
		names = append(names, r.Name)
	}
	require.Equal(t, []string{"alpha", "mid", "zeta"}, names)
	rows, err = f.st.ListSecrets(f.ctx, f.owner("carol"))
	require.NoError(t, err)
	require.NotNil(t, rows)
	require.Empty(t, rows)
}

func testSecretQuota(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	for _, n := range []string{"a", "b"} {
		_, err := f.st.PutSecretWithin(f.ctx, newSecret(alice, n, at(0)), 2)
		require.NoError(t, err)
	}
	_, err := f.st.PutSecretWithin(f.ctx, newSecret(alice, "c", at(0)), 2)
	require.ErrorIs(t, err, store.ErrQuota)
	created, err := f.st.PutSecretWithin(f.ctx, newSecret(alice, "b", at(time.Minute)), 2)
	require.NoError(t, err, "replacing at the limit is no new secret")
	require.False(t, created)
	_, err = f.st.PutSecretWithin(f.ctx, newSecret(f.owner("bob"), "c", at(0)), 2)
	require.NoError(t, err, "the limit is per principal")
}

func testSecretDelete(f *fixture) {
	t := f.t
	alice, bob := f.owner("alice"), f.owner("bob")
	_, err := f.st.PutSecretWithin(f.ctx, newSecret(alice, "gone", at(0)), 0)
	require.NoError(t, err)
	require.ErrorIs(t, f.st.DeleteSecret(f.ctx, bob, "gone"), store.ErrNotFound, "not bob's to delete")
	require.NoError(t, f.st.DeleteSecret(f.ctx, alice, "gone"))
	require.ErrorIs(t, f.st.DeleteSecret(f.ctx, alice, "gone"), store.ErrNotFound)
	_, err = f.st.GetSecret(f.ctx, alice, "gone")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testSecretReseal(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	for i, n := range []string{"one", "two"} {
		_, err := f.st.PutSecretWithin(f.ctx, newSecret(alice, n, at(time.Duration(i)*time.Minute)), 0)
		require.NoError(t, err)
	}
	k2 := newSecret(alice, "three", at(time.Hour))
	k2.KeyID = "k2"
	_, err := f.st.PutSecretWithin(f.ctx, k2, 0)
	require.NoError(t, err)

	old, err := f.st.SecretsSealedWithout(f.ctx, "k2", 10)
	require.NoError(t, err)
	require.Len(t, old, 2)
	require.Equal(t, "one", old[0].Name, "oldest update first")
	page, err := f.st.SecretsSealedWithout(f.ctx, "k2", 1)
	require.NoError(t, err)
	require.Len(t, page, 1)

	ok, err := f.st.ResealSecret(f.ctx, alice, "one", "k1", "k2", []byte("resealed"))
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = f.st.ResealSecret(f.ctx, alice, "one", "k1", "k2", []byte("again"))
	require.NoError(t, err)
	require.False(t, ok, "no longer under k1")
	got, err := f.st.GetSecret(f.ctx, alice, "one")
	require.NoError(t, err)
	require.Equal(t, "k2", got.KeyID)
	require.Equal(t, []byte("resealed"), got.Sealed)
	require.True(t, got.UpdatedAt.Equal(at(0)), "re-sealing is no update of the value")
	ok, err = f.st.ResealSecret(f.ctx, alice, "nosuch", "k1", "k2", []byte("x"))
	require.NoError(t, err)
	require.False(t, ok)
}

func testSessionSecrets(f *fixture) {
	t := f.t
	alice := f.owner("alice")
	s := newSession("sessecrets01", alice, at(0))
	s.Secrets = map[string]string{"openai": "sgs_aaaa", "gh": "sgs_bbbb"}
	require.NoError(t, f.st.CreateSessionWithin(f.ctx, s, 0))
	got, err := f.st.GetSession(f.ctx, s.ID)
	require.NoError(t, err)
	require.Equal(t, s.Secrets, got.Secrets)

	plain := newSession("sessecrets02", alice, at(0))
	require.NoError(t, f.st.CreateSessionWithin(f.ctx, plain, 0))
	got, err = f.st.GetSession(f.ctx, plain.ID)
	require.NoError(t, err)
	require.NotNil(t, got.Secrets)
	require.Empty(t, got.Secrets)
}
