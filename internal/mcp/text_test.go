package mcp

import (
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHeadTail(t *testing.T) {
	cut := func(s string, n int) string { out, _ := headTail(s, n); return out }
	require.Equal(t, "", cut("", 3))
	require.Equal(t, "abc", cut("abc", 3))
	require.Equal(t, "abc", cut("abc", 0), "no limit")
	out, truncated := headTail("abcdefghij", 4)
	require.True(t, truncated)
	require.Equal(t, "ab\n…[6 characters cut]…\nij", out)
	_, truncated = headTail("abcd", 4)
	require.False(t, truncated)
	require.Equal(t, "é\n…[1 characters cut]…\néé", cut("ééééé"[:8], 3), "runes, not bytes")
	require.Equal(t, "日\n…[1 characters cut]…\n語", cut("日本語", 2))
}

func TestIsBinary(t *testing.T) {
	require.False(t, isBinary([]byte("plain text\nwith é")))
	require.False(t, isBinary([]byte("cut rune \xc3")), "a rune cut by the end of the sample is text")
	require.True(t, isBinary([]byte("nul\x00byte")))
	require.True(t, isBinary([]byte{0x89, 'P', 'N', 'G'}))
	require.True(t, isBinary([]byte("bad \xff\xfe in the middle")))
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
