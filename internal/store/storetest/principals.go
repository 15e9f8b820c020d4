package storetest

import (
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/store"
)

var principalTests = []test{
	{"upsert", testUpsertPrincipal},
	{"label", testPrincipalLabel},
	{"get", testGetPrincipal},
	{"seen", testSeenPrincipal},
}

func testSeenPrincipal(f *fixture) {
	t := f.t
	p, err := f.st.UpsertPrincipal(f.ctx, store.Principal{Issuer: "https://i", Subject: "alice", Username: "al", Email: "a@x", Groups: []string{"ml"}}, at(0))
	require.NoError(t, err)
	seen, err := f.st.SeenPrincipal(f.ctx, p.ID, at(time.Hour))
	require.NoError(t, err)
	require.Equal(t, p.ID, seen.ID)
	require.Equal(t, "al", seen.Username)
	require.Equal(t, []string{"ml"}, seen.Groups, "claims unchanged")
	sameTime(t, at(0), seen.FirstSeenAt, "first_seen_at")
	sameTime(t, at(time.Hour), seen.LastSeenAt, "last_seen_at")
	earlier, err := f.st.SeenPrincipal(f.ctx, p.ID, at(time.Minute))
	require.NoError(t, err)
	sameTime(t, at(time.Hour), earlier.LastSeenAt, "last_seen_at never moves back")
	got, err := f.st.GetPrincipal(f.ctx, p.ID)
	require.NoError(t, err)
	sameTime(t, at(time.Hour), got.LastSeenAt, "recorded")
	_, err = f.st.SeenPrincipal(f.ctx, notAPrincipal, at(0))
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testUpsertPrincipal(f *fixture) {
	t := f.t
	first, err := f.st.UpsertPrincipal(f.ctx, store.Principal{Issuer: "https://i", Subject: "alice", Username: "al", Email: "a@x"}, at(0))
	require.NoError(t, err)
	require.NotEmpty(t, first.ID)
	require.Equal(t, "al", first.Username)
	require.NotNil(t, first.Groups, "no groups: an empty list")
	require.Empty(t, first.Groups)
	sameTime(t, at(0), first.FirstSeenAt, "first_seen_at")
	sameTime(t, at(0), first.LastSeenAt, "last_seen_at")

	again, err := f.st.UpsertPrincipal(f.ctx, store.Principal{Issuer: "https://i", Subject: "alice", Username: "Alice", Groups: []string{"b"}}, at(time.Hour))
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID, "one principal per issuer and subject")
	require.Equal(t, "Alice", again.Username)
	require.Equal(t, []string{"b"}, again.Groups)
	sameTime(t, at(0), again.FirstSeenAt, "first_seen_at stays")
	sameTime(t, at(time.Hour), again.LastSeenAt, "last_seen_at")

	earlier, err := f.st.UpsertPrincipal(f.ctx, store.Principal{Issuer: "https://i", Subject: "alice"}, at(-time.Hour))
	require.NoError(t, err)
	require.Equal(t, first.ID, earlier.ID)
	sameTime(t, at(0), earlier.FirstSeenAt, "first_seen_at stays")
	sameTime(t, at(time.Hour), earlier.LastSeenAt, "last_seen_at never moves back")

	other, err := f.st.UpsertPrincipal(f.ctx, store.Principal{Issuer: "https://other", Subject: "alice"}, at(0))
	require.NoError(t, err)
	require.NotEqual(t, first.ID, other.ID, "the same subject at another issuer is another principal")
}

func testPrincipalLabel(f *fixture) {
	t := f.t
	p, err := f.st.UpsertPrincipal(f.ctx, store.Principal{Issuer: "https://i", Subject: "alice"}, at(0))
	require.NoError(t, err)
	label, err := f.st.PrincipalLabel(f.ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, "https://i#alice", label)
	_, err = f.st.PrincipalLabel(f.ctx, notAPrincipal)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testGetPrincipal(f *fixture) {
	t := f.t
	p, err := f.st.UpsertPrincipal(f.ctx, store.Principal{Issuer: "https://i", Subject: "alice", Username: "al", Email: "a@x", Groups: []string{"ml", "dev"}}, at(0))
	require.NoError(t, err)
	_, err = f.st.UpsertPrincipal(f.ctx, store.Principal{Issuer: "https://i", Subject: "alice", Username: "al", Email: "a@x", Groups: []string{"dev"}}, at(time.Minute))
	require.NoError(t, err)
	got, err := f.st.GetPrincipal(f.ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, p.ID, got.ID)
	require.Equal(t, "https://i", got.Issuer)
	require.Equal(t, "alice", got.Subject)
	require.Equal(t, "al", got.Username)
	require.Equal(t, "a@x", got.Email)
	require.Equal(t, []string{"dev"}, got.Groups, "the groups of the latest token")
	sameTime(t, at(0), got.FirstSeenAt, "first_seen_at")
	sameTime(t, at(time.Minute), got.LastSeenAt, "last_seen_at")
	_, err = f.st.GetPrincipal(f.ctx, notAPrincipal)
	require.ErrorIs(t, err, store.ErrNotFound)
}
