package mcp

import (
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFirstRunes(t *testing.T) {
	require.Equal(t, "", firstRunes("", 3))
	require.Equal(t, "abc", firstRunes("abc", 3))
	require.Equal(t, "ab", firstRunes("abc", 2))
	require.Equal(t, "éé", firstRunes("ééé", 2))
	require.Equal(t, "é", firstRunes("é", 1))
	require.Equal(t, "日本", firstRunes("日本語", 2))
	require.Equal(t, "abc", firstRunes("abc", 0), "no limit")
}

func TestDecodeText(t *testing.T) {
	require.Equal(t, "plain", decodeText("plain", "utf-8"))
	b64 := base64.StdEncoding.EncodeToString([]byte{'a', 0xff, 0xfe, 'b', 0xc3})
	require.Equal(t, "a\uFFFD\uFFFDb\uFFFD", decodeText(b64, "base64"))
	require.Equal(t, "ok é", replaceInvalid([]byte("ok é")))
}

func TestSessionRef(t *testing.T) {
	for _, c := range []struct{ id, profile, wantID, wantProfile string }{
		{"", "", "default", ""},
		{"", "p", "default", "p"},
		{"default", "p", "default", "p"},
		{"default:p", "", "default", "p"},
		{"default:p", "p", "default", "p"},
		{"default:", "q", "default", "q"},
		{"0123456789abcdef0123456789abcdef", "", "0123456789abcdef0123456789abcdef", ""},
	} {
		id, prof, err := sessionRef(c.id, c.profile)
		require.NoError(t, err)
		require.Equal(t, []string{c.wantID, c.wantProfile}, []string{id, prof}, "%+v", c)
	}
	_, _, err := sessionRef("default:p", "q")
	require.ErrorContains(t, err, "omit profile")
}
