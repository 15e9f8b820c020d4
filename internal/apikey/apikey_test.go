package apikey_test

import (
	"crypto/sha256"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/apikey"
)

func TestNewParses(t *testing.T) {
	shape := regexp.MustCompile(`^sgk_[0-9A-Za-z]{49}$`)
	seen := map[string]bool{}
	for range 200 {
		k := apikey.New()
		require.Regexp(t, shape, k.Secret)
		require.Len(t, k.Secret, apikey.Len)
		require.Equal(t, sha256.Sum256([]byte(k.Secret)), k.Hash)
		require.Equal(t, k.Secret[:12], k.Display)
		require.False(t, seen[k.Secret], "keys repeat")
		seen[k.Secret] = true
		p, err := apikey.Parse(k.Secret)
		require.NoError(t, err)
		require.Equal(t, k, p)
	}
}

func TestParseRefuses(t *testing.T) {
	k := apikey.New().Secret
	flip := func(s string, i int) string {
		c := byte('a')
		if s[i] == 'a' {
			c = 'b'
		}
		return s[:i] + string(c) + s[i+1:]
	}
	for name, s := range map[string]string{
		"jwt":           "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln",
		"empty":         "",
		"cut":           k[:apikey.Len-1],
		"longer":        k + "x",
		"not base62":    k[:10] + "-" + k[11:],
		"typo":          flip(k, 20),
		"typo in check": flip(k, apikey.Len-1),
		"other prefix":  "sgx_" + k[4:],
	} {
		t.Run(name, func(t *testing.T) {
			_, err := apikey.Parse(s)
			require.ErrorIs(t, err, apikey.ErrMalformed)
			require.True(t, strings.HasPrefix(err.Error(), "malformed API key: "), err.Error())
		})
	}
	require.True(t, apikey.Is(k))
	require.False(t, apikey.Is("eyJhbGciOi"))
}
