// Package jsontext checks that a request body is one JSON text that encoding/json will decode
// to exactly what the caller sent. encoding/json is lenient in three ways that would change a
// request silently, so the edges (the REST gate, the MCP endpoint) refuse such bodies first:
//
//   - bytes that are not UTF-8 (RFC 8259 §8.1) decode to U+FFFD: a program would run with
//     other bytes than the caller sent;
//   - a \uXXXX escape of an unpaired UTF-16 surrogate (RFC 8259 §8.2) decodes to U+FFFD too;
//   - a value after the first (`{…}{…}`) is ignored by a Decoder: half the request would be
//     dropped.
//
// Malformed JSON is not this package's business: the edges' own decoders name the syntax
// error.
package jsontext

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Problem returns why b cannot be taken as it is, or "" when nothing is wrong with it in the
// three ways above. encoding reports a problem of the text's encoding (the first two): its
// message names no next step, since the edge knows its own way to send binary data.
func Problem(b []byte) (msg string, encoding bool) {
	if !utf8.Valid(b) {
		off := 0
		for off < len(b) {
			r, n := utf8.DecodeRune(b[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		return fmt.Sprintf("the body is not valid UTF-8 (RFC 8259 §8.1): byte %d (0x%02x) starts no UTF-8 character", off, b[off]), true
	}
	if off := unpairedSurrogate(b); off >= 0 {
		return fmt.Sprintf("the body's escape %s at byte %d is an unpaired UTF-16 surrogate, which is no character (RFC 8259 §8.2)", b[off:off+6], off), true
	}
	if !json.Valid(b) {
		dec := json.NewDecoder(bytes.NewReader(b))
		var first json.RawMessage
		if dec.Decode(&first) == nil {
			if off := dec.InputOffset(); len(bytes.TrimSpace(b[off:])) > 0 {
				return fmt.Sprintf("the body has data after its JSON value (from byte %d); send exactly one JSON value per request", off), false
			}
		}
	}
	return "", false
}

// unpairedSurrogate returns the offset of the first \uXXXX escape inside a JSON string of b
// that is a UTF-16 surrogate without its pair, or -1.
func unpairedSurrogate(b []byte) int {
	escape := func(i int) (rune, bool) { // the \uXXXX at b[i:], if there is one
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			r, ok := escape(i)
			if !ok {
				i++ // a one-character escape such as \" or \\
				continue
			}
			switch {
			case r >= 0xD800 && r < 0xDC00: // a high surrogate: its low one must follow
				if lo, ok := escape(i + 6); ok && utf16.IsSurrogate(lo) && lo >= 0xDC00 {
					i += 11
					continue
				}
				return i
			case utf16.IsSurrogate(r): // a low surrogate alone
				return i
			}
			i += 5
		}
	}
	return -1
}
