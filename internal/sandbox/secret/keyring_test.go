package secret_test

import (
	"bytes"
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandbox/secret"
)

var key32 = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))

// Keys are id:base64 of 32 bytes, each id once; anything else stops the gateway with the
// setting named.
func TestParseKeys(t *testing.T) {
	t.Parallel()
	for _, bad := range [][]string{
		{"nokey"},
		{":" + key32},
		{"k 1:" + key32},
		{"k1:" + base64.StdEncoding.EncodeToString([]byte("short"))},
		{"k1:not base64!"},
		{"k1:" + key32, "k1:" + key32},
	} {
		_, err := secret.ParseKeys(bad)
		require.Error(t, err, "%v", bad)
		assert.Contains(t, err.Error(), "secrets.keys")
	}
	ring, err := secret.ParseKeys(nil)
	require.NoError(t, err)
	assert.False(t, ring.Enabled())
	_, _, err = ring.Seal("o", "n", []byte("v"))
	assert.Equal(t, fault.Config, fault.KindOf(err))
}

// A sealed value opens only as its owner's secret of its name, under its key, untampered;
// sealing the same value twice gives two ciphertexts (a fresh nonce each time).
func TestSealOpen(t *testing.T) {
	t.Parallel()
	ring, err := secret.ParseKeys([]string{"k1:" + key32})
	require.NoError(t, err)
	id, a, err := ring.Seal("owner", "openai", []byte("value"))
	require.NoError(t, err)
	assert.Equal(t, "k1", id)
	_, b, err := ring.Seal("owner", "openai", []byte("value"))
	require.NoError(t, err)
	assert.NotEqual(t, a, b)
	assert.False(t, bytes.Contains(a, []byte("value")))

	v, err := ring.Open("k1", "owner", "openai", a)
	require.NoError(t, err)
	assert.Equal(t, []byte("value"), v)
	for _, c := range []struct{ key, owner, name string }{{"k1", "other", "openai"}, {"k1", "owner", "github"}} {
		_, err := ring.Open(c.key, c.owner, c.name, a)
		assert.Error(t, err, "%+v", c)
	}
	_, err = ring.Open("k0", "owner", "openai", a)
	assert.Equal(t, fault.Config, fault.KindOf(err), "a key no longer configured")
	tampered := bytes.Clone(a)
	tampered[len(tampered)-1] ^= 1
	_, err = ring.Open("k1", "owner", "openai", tampered)
	assert.Error(t, err)
	_, err = ring.Open("k1", "owner", "openai", a[:5])
	assert.Error(t, err)
}

func TestEnvName(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "SANDGATE_SECRET_OPENAI", secret.EnvName("openai"))
	assert.Equal(t, "SANDGATE_SECRET_GH_TOKEN_2", secret.EnvName("gh-token_2"))
}
