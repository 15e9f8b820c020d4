package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/sandbox/secret"
	"github.com/sandgate/sandgate/internal/store"
	"github.com/sandgate/sandgate/internal/store/postgres"
	"github.com/sandgate/sandgate/internal/testutil/pgtest"
)

func keySpec(id string) string {
	var k [32]byte
	_, _ = rand.Read(k[:])
	return id + ":" + base64.StdEncoding.EncodeToString(k[:])
}

// TestSecretsReseal: a key rotation's second step. With the new key first and the old one
// still listed, `gateway secrets reseal` moves every secret to the new key; the old key can
// then go and the values still open.
func TestSecretsReseal(t *testing.T) {
	requirePostgres(t)
	t.Parallel()
	ctx := t.Context()
	url := pgtest.URL(t)
	oldKey, newKey := keySpec("old"), keySpec("new")
	st, err := postgres.Open(ctx, url, 2)
	require.NoError(t, err)
	defer st.Close()
	_, err = st.Migrate(ctx)
	require.NoError(t, err)
	p, err := st.UpsertPrincipal(ctx, store.Principal{Issuer: "https://issuer.test", Subject: "alice"}, time.Now())
	require.NoError(t, err)
	oldRing, err := secret.ParseKeys([]string{oldKey})
	require.NoError(t, err)
	keyID, sealed, err := oldRing.Seal(p.ID, "openai", []byte("the-value"))
	require.NoError(t, err)
	_, err = st.PutSecretWithin(ctx, store.Secret{OwnerID: p.ID, Name: "openai", Hosts: []string{"api.openai.com"}, KeyID: keyID, Sealed: sealed, UpdatedAt: time.Now()}, 0)
	require.NoError(t, err)

	var out, errb bytes.Buffer
	env := []string{"SANDGATE_DATABASE__URL=" + url, "SANDGATE_SECRETS__KEYS=" + newKey + "," + oldKey}
	require.NoError(t, run(ctx, []string{"secrets", "reseal"}, env, &out, &errb), "stderr: %s", errb.String())
	require.Equal(t, "re-sealed 1 secret(s) under key new\n", out.String())

	row, err := st.GetSecret(ctx, p.ID, "openai")
	require.NoError(t, err)
	require.Equal(t, "new", row.KeyID)
	newRing, err := secret.ParseKeys([]string{newKey})
	require.NoError(t, err)
	v, err := newRing.Open(row.KeyID, p.ID, "openai", row.Sealed)
	require.NoError(t, err)
	require.Equal(t, "the-value", string(v))

	out.Reset()
	require.NoError(t, run(ctx, []string{"secrets", "reseal"}, env, &out, &errb))
	require.Equal(t, "re-sealed 0 secret(s) under key new\n", out.String(), "nothing left to move")
	require.Error(t, run(ctx, []string{"secrets", "reseal"}, []string{"SANDGATE_DATABASE__URL=" + url}, &out, &errb), "no key configured")
}
