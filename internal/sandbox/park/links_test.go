package park

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withPart is token with its dot-separated part i replaced by v.
func withPart(token string, i int, v string) string {
	parts := strings.Split(token, ".")
	parts[i] = v
	return strings.Join(parts, ".")
}

// A link's token names its kind, session, port, maker, the API key it was made with and its
// times in the clear and is good only as signed: any change, another key, or garbage fails.
func TestLinkTokens(t *testing.T) {
	t.Parallel()
	key := []byte(strings.Repeat("k", 32))
	sid, maker := strings.Repeat("a", 32), "0b6e4a4e-8a46-4a3a-9d6c-1f0c6e1d2a33"
	exp, openBy := time.Unix(1_900_000_000, 0), time.Unix(1_899_999_000, 0)
	share := signLink(key, PortLink{SessionID: sid, Port: 8000, PrincipalID: maker, ExpiresAt: exp})
	assert.Regexp(t, `^v3\.s\.`+sid+`\.8000\.`+maker+`\.\.1900000000\.0\.[A-Za-z0-9_-]{16}\.[A-Za-z0-9_-]{43}$`, share)
	again := signLink(key, PortLink{SessionID: sid, Port: 8000, PrincipalID: maker, ExpiresAt: exp})
	assert.NotEqual(t, share, again, "two links made alike are two links")
	l, ok := verifyLink(key, share)
	require.True(t, ok)
	assert.Equal(t, PortLink{Token: share, SessionID: sid, Port: 8000, PrincipalID: maker, ExpiresAt: exp}, l)

	keyID := strings.Repeat("c", 32)
	personal := signLink(key, PortLink{SessionID: sid, Port: 8000, PrincipalID: maker, APIKeyID: keyID, ExpiresAt: exp, Personal: true, OpenBy: openBy})
	assert.True(t, strings.HasPrefix(personal, "v3.p."+sid+".8000."+maker+"."+keyID+".1900000000.1899999000."), personal)
	l, ok = verifyLink(key, personal)
	require.True(t, ok)
	assert.True(t, l.Personal)
	assert.True(t, openBy.Equal(l.OpenBy))
	assert.Equal(t, keyID, l.APIKeyID)

	for name, bad := range map[string]string{
		"port":       strings.Replace(share, ".8000.", ".8001.", 1),
		"session":    strings.Replace(share, sid, strings.Repeat("b", 32), 1),
		"maker":      strings.Replace(share, maker, "0b6e4a4e-8a46-4a3a-9d6c-1f0c6e1d2a34", 1),
		"expiry":     strings.Replace(share, ".1900000000.", ".1900000001.", 1),
		"kind":       strings.Replace(share, "v3.s.", "v3.p.", 1),
		"key added":  withPart(share, 5, keyID),
		"key":        withPart(personal, 5, strings.Repeat("d", 32)),
		"key gone":   withPart(personal, 5, ""),
		"bad key id": withPart(personal, 5, "x.y"),
		"open-by":    strings.Replace(personal, ".1899999000.", ".1899999999.", 1),
		"nonce":      withPart(share, 8, "AAAAAAAAAAAAAAAA"),
		"signature":  share[:len(share)-2] + "AA",
		"version":    "v1" + share[2:],
		"truncated":  share[:strings.LastIndex(share, ".")],
		"garbage":    "not a token",
		"empty":      "",
		"very long":  share + strings.Repeat("x", 600),
		"extra part": share + ".x",
	} {
		_, ok := verifyLink(key, bad)
		assert.False(t, ok, name)
	}
	_, ok = verifyLink([]byte(strings.Repeat("o", 32)), share)
	assert.False(t, ok, "another deployment's key")
	// A version 1 token, as the gateway signed them before links named their maker.
	v1 := "v1." + sid + ".8000.1900000000." + base64.RawURLEncoding.EncodeToString(linkMAC(key, "v1."+sid+".8000.1900000000"))
	_, ok = verifyLink(key, v1)
	assert.False(t, ok, "version 1 tokens are no longer accepted")
	// A version 2 token, as the gateway signed them before links named their key: one made
	// with a key would outlive its revocation.
	v2body := "v2.s." + sid + ".8000." + maker + ".1900000000.0.AAAAAAAAAAAAAAAA"
	_, ok = verifyLink(key, v2body+"."+base64.RawURLEncoding.EncodeToString(linkMAC(key, v2body)))
	assert.False(t, ok, "version 2 tokens are no longer accepted")
}
