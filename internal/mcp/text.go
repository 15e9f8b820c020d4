package mcp

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"
	"unicode/utf8"
)

// cut bounds s to tool_output_max_chars characters (runes) as REST bounds output: the first
// and the last half are kept and the middle is replaced by a marker line naming how many
// characters were dropped. cut reports whether it dropped any (the result's "truncated").
func (h *Handler) cut(s string) (string, bool) { return headTail(s, h.maxChars) }

// headTail keeps the first n/2 and the last n-n/2 runes of s with a marker between them;
// n ≤ 0 means no limit.
func headTail(s string, n int) (string, bool) {
	if n <= 0 || len(s) <= n { // len in bytes ≥ runes: short strings need no scan
		return s, false
	}
	total := utf8.RuneCountInString(s)
	if total <= n {
		return s, false
	}
	head, tail := n/2, n-n/2
	headEnd, tailStart, i := 0, len(s), 0
	for at := range s {
		if i == head {
			headEnd = at
		}
		if i == total-tail {
			tailStart = at
			break
		}
		i++
	}
	return s[:headEnd] + fmt.Sprintf(cutMarker, total-n) + s[tailStart:], true
}

// cutMarker stands for the characters headTail dropped.
const cutMarker = "\n…[%d characters cut]…\n"

// headTailReader keeps the first head and the last tail bytes of what is written to it, and
// counts them all: a whole file passes through it in constant memory.
type headTailReader struct {
	head, tail []byte
	headMax    int
	tailMax    int
	n          int64
}

func (w *headTailReader) Write(p []byte) (int, error) {
	written := len(p)
	w.n += int64(written)
	if room := w.headMax - len(w.head); room > 0 {
		k := min(room, len(p))
		w.head = append(w.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 || w.tailMax == 0 {
		return written, nil
	}
	w.tail = append(w.tail, p...)
	if over := len(w.tail) - w.tailMax; over > 0 {
		w.tail = append(w.tail[:0], w.tail[over:]...)
	}
	return written, nil
}

// isBinary reports whether b (the start of a file) is no UTF-8 text: invalid UTF-8 (a
// rune cut at the end of b aside) or a NUL byte.
func isBinary(b []byte) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return true
	}
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			return !(len(b) < utf8.UTFMax && !utf8.FullRune(b)) // a rune cut by the end of b is fine
		}
		b = b[size:]
	}
	return false
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
