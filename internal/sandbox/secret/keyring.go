package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/sandgate/sandgate/internal/fault"
)

// KeyBytes is the length of a secrets key: AES-256.
const KeyBytes = 32

// keyIDPattern is what a key's id may be: it is stored with every value sealed under it.
var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// Keyring seals and opens secret values with AES-256-GCM (docs/semantics.md, Secrets). The
// first key seals; every key opens what was sealed under it, so a key is rotated by adding the
// new one first, re-sealing (gateway secrets reseal, or each secret's next PUT) and then
// removing the old one. A value is bound to its owner and name (GCM's additional data): a
// sealed value moved to another row does not open. The zero or nil Keyring has no key and
// refuses both (NoKey).
type Keyring struct {
	keys []key
}

type key struct {
	id   string
	aead cipher.AEAD
}

// ParseKeys builds a Keyring from specs "id:key", key the standard base64 of KeyBytes
// random bytes (`openssl rand -base64 32`), the first one sealing. Ids are 1–64 letters,
// digits or "_.-", each used once. No specs: a Keyring with no key.
func ParseKeys(specs []string) (*Keyring, error) {
	k := &Keyring{}
	seen := map[string]bool{}
	for i, spec := range specs {
		id, b64, ok := strings.Cut(strings.TrimSpace(spec), ":")
		if !ok || !keyIDPattern.MatchString(id) {
			return nil, fmt.Errorf("secrets.keys[%d]: want id:base64-key, the id 1-64 letters, digits or _.- (e.g. k1:$(openssl rand -base64 32))", i)
		}
		if seen[id] {
			return nil, fmt.Errorf("secrets.keys[%d]: key id %q is given twice", i, id)
		}
		seen[id] = true
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(raw) != KeyBytes {
			return nil, fmt.Errorf("secrets.keys[%d] (%s): the key must be %d bytes in standard base64 (openssl rand -base64 32)", i, id, KeyBytes)
		}
		block, err := aes.NewCipher(raw)
		if err != nil {
			return nil, fmt.Errorf("secrets.keys[%d] (%s): %w", i, id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("secrets.keys[%d] (%s): %w", i, id, err)
		}
		k.keys = append(k.keys, key{id: id, aead: aead})
	}
	return k, nil
}

// NoKey is the refusal of a keyring without keys: fault.Config naming the setting.
func NoKey() error {
	return fault.New(fault.Config, "secrets are off on this gateway: no key is configured; an operator sets secrets.keys (environment SANDGATE_SECRETS__KEYS) to id:base64-key, e.g. k1:$(openssl rand -base64 32)")
}

// Enabled reports whether the keyring has a key.
func (k *Keyring) Enabled() bool { return k != nil && len(k.keys) > 0 }

// Primary is the id of the key that seals ("" without keys).
func (k *Keyring) Primary() string {
	if !k.Enabled() {
		return ""
	}
	return k.keys[0].id
}

// additional is the data a value of owner's secret name is bound to.
func additional(owner, name string) []byte {
	return []byte("sandgate secret\x00" + owner + "\x00" + name)
}

// Seal seals value of owner's secret name under the first key, and returns that key's id and
// the nonce followed by the ciphertext. Without keys: NoKey().
func (k *Keyring) Seal(owner, name string, value []byte) (string, []byte, error) {
	if !k.Enabled() {
		return "", nil, NoKey()
	}
	p := k.keys[0]
	nonce := make([]byte, p.aead.NonceSize(), p.aead.NonceSize()+len(value)+p.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", nil, fmt.Errorf("secrets: reading a nonce: %w", err)
	}
	return p.id, p.aead.Seal(nonce, nonce, value, additional(owner, name)), nil
}

// Open opens sealed, owner's secret name sealed under keyID. Without that key: fault.Config
// saying it is no longer configured; a value that does not open (tampered, another row's):
// an error.
func (k *Keyring) Open(keyID, owner, name string, sealed []byte) ([]byte, error) {
	if !k.Enabled() {
		return nil, NoKey()
	}
	for _, c := range k.keys {
		if c.id != keyID {
			continue
		}
		n := c.aead.NonceSize()
		if len(sealed) < n+c.aead.Overhead() {
			return nil, fmt.Errorf("secrets: the sealed value of %q is too short", name)
		}
		v, err := c.aead.Open(nil, sealed[:n], sealed[n:], additional(owner, name))
		if err != nil {
			return nil, errors.New("secrets: the value of " + name + " does not open under key " + keyID + " (tampered, or not this row's)")
		}
		return v, nil
	}
	return nil, fault.New(fault.Config, "secret '%s' is sealed under key '%s', which is no longer in secrets.keys; an operator adds it back (and re-seals: sandgate-gateway secrets reseal) or the secret is set again", name, keyID)
}
