package mcp

import (
	"encoding/base64"
	"strings"
	"unicode/utf8"
)

// cut keeps the first tool_output_max_chars characters (runes) of s, as the seed's
// s[:tool_output_max_chars] does.
func (h *Handler) cut(s string) string { return firstRunes(s, h.maxChars) }

func firstRunes(s string, n int) string {
	if n <= 0 || len(s) <= n { // len in bytes ≥ runes: short strings need no scan
		return s
	}
	i := 0
	for at := range s {
		if i == n {
			return s[:at]
		}
		i++
	}
	return s
}

// decodeText returns an execution stream as text: the service sends both streams base64 when
// either is not valid UTF-8; tools decode them with replacement (the seed's errors="replace").
func decodeText(s, encoding string) string {
	if encoding != "base64" {
		return s
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return s
	}
	return replaceInvalid(b)
}

// replaceInvalid decodes b as UTF-8, each invalid byte becoming U+FFFD.
func replaceInvalid(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			sb.WriteRune(utf8.RuneError)
		} else {
			sb.Write(b[:size])
		}
		b = b[size:]
	}
	return sb.String()
}
