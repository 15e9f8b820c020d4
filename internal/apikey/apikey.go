// Package apikey is the format of Sandgate's API keys (docs/semantics.md §1 API key):
//
//	sgk_<43 base62 characters: 256 random bits><6 base62 characters: CRC-32 of what precedes>
//
// 53 characters of [0-9A-Za-z_], one word to a double click. The prefix lets secret scanners
// and the gateway tell a key from a JWT (whose first part, base64url of a JSON object, starts
// "eyJ"); the checksum lets both tell a key from a mistyped or cut one without a lookup. The
// gateway keeps only a key's SHA-256 (Hash): 256 random bits need no salt or slow hash, since
// nothing about them can be guessed. Display is the secret's first characters, shown to tell
// keys apart; it carries 47 of the 256 bits.
package apikey

import (
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/crc32"
	"math/big"
	"strings"
)

// Prefix starts every key.
const Prefix = "sgk_"

const (
	alphabet   = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" // big.Int.Text(62)'s digits
	randomLen  = 43                                                               // ⌈256 / log2(62)⌉
	checkLen   = 6                                                                // ⌈32 / log2(62)⌉
	displayLen = 8                                                                // characters of the random part shown
)

// Len is a key's length in bytes.
const Len = len(Prefix) + randomLen + checkLen

// Key is a key's secret with what the gateway keeps of it.
type Key struct {
	// Secret is the key itself; it is shown once, to whoever made it.
	Secret string
	// Hash is the SHA-256 of Secret: all the gateway stores to recognise it.
	Hash [32]byte
	// Display is Prefix and the secret's first characters, for lists ("sgk_3fQx9LmA").
	Display string
}

// ErrMalformed wraps every reason Parse refuses a string.
var ErrMalformed = errors.New("malformed API key")

// New makes a key of 256 bits from crypto/rand.
func New() Key {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand.Read crashes the program instead)
	body := Prefix + pad(new(big.Int).SetBytes(b[:]).Text(62), randomLen)
	k, _ := Parse(body + checksum(body))
	return k
}

// Is reports whether s has a key's prefix (so it is meant as an API key, not a JWT).
func Is(s string) bool { return strings.HasPrefix(s, Prefix) }

// Parse checks that s is a well-formed key — length, characters, checksum — and returns it
// with its hash and display prefix. Errors wrap ErrMalformed and say what is wrong.
func Parse(s string) (Key, error) {
	if !Is(s) {
		return Key{}, fmt.Errorf("%w: an API key starts with %q", ErrMalformed, Prefix)
	}
	if len(s) != Len {
		return Key{}, fmt.Errorf("%w: an API key is %d characters long, this one %d (cut, or more pasted with it?)", ErrMalformed, Len, len(s))
	}
	rest := s[len(Prefix):]
	for i := 0; i < len(rest); i++ {
		if strings.IndexByte(alphabet, rest[i]) < 0 {
			return Key{}, fmt.Errorf("%w: an API key has only letters and digits after %q", ErrMalformed, Prefix)
		}
	}
	body := s[:Len-checkLen]
	if s[Len-checkLen:] != checksum(body) {
		return Key{}, fmt.Errorf("%w: its checksum does not match (mistyped, or not a key this gateway made)", ErrMalformed)
	}
	return Key{Secret: s, Hash: sha256.Sum256([]byte(s)), Display: s[:len(Prefix)+displayLen]}, nil
}

// checksum is the CRC-32 (IEEE) of body in base62, checkLen characters.
func checksum(body string) string {
	return pad(new(big.Int).SetUint64(uint64(crc32.ChecksumIEEE([]byte(body)))).Text(62), checkLen)
}

// pad left-pads digits with zeros to n characters.
func pad(digits string, n int) string {
	return strings.Repeat("0", max(n-len(digits), 0)) + digits
}
