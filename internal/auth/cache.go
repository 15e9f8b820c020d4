package auth

import (
	"slices"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/sandgate/sandgate/internal/principal"
)

// Bounds of the verified-token cache: verifiedTTL is the longest a token is trusted without
// checking its signature again (a key its issuer withdrew stops being honoured within it, and
// at once when the gateway fetches the changed key set); verifiedMax bounds the memory.
const (
	verifiedTTL = time.Minute
	verifiedMax = 10000
)

// verifiedCache remembers tokens that verified, keyed by their SHA-256 (the token itself is
// never kept as a key).
type verifiedCache struct {
	lru *lru.Cache[[32]byte, verifiedToken]
}

type verifiedToken struct {
	p       principal.Principal
	exp     time.Time // the token's exp claim
	checked time.Time // when the signature was checked
	is      *issuer
	gen     uint64 // is.keysGen when the signature was checked
}

func newVerifiedCache() *verifiedCache {
	c, err := lru.New[[32]byte, verifiedToken](verifiedMax)
	if err != nil {
		panic(err) // only for a size ≤ 0
	}
	return &verifiedCache{lru: c}
}

// get returns the principal of a token that verified, while it has not expired (with the
// clock skew allowed) and its issuer's keys are the ones it verified under; a copy, so
// callers may change it.
func (c *verifiedCache) get(key [32]byte, now time.Time, skew time.Duration) (principal.Principal, bool) {
	v, ok := c.lru.Get(key)
	if !ok {
		return principal.Principal{}, false
	}
	if now.After(v.exp.Add(skew)) || now.Sub(v.checked) > verifiedTTL || now.Before(v.checked) || v.is.keysGen.Load() != v.gen {
		c.lru.Remove(key)
		return principal.Principal{}, false
	}
	p := v.p
	p.Groups = slices.Clone(p.Groups)
	p.Credentials.KubernetesGroups = slices.Clone(p.Credentials.KubernetesGroups)
	return p, true
}

func (c *verifiedCache) add(key [32]byte, p principal.Principal, exp, now time.Time, is *issuer, gen uint64) {
	p.Groups = slices.Clone(p.Groups)
	p.Credentials.KubernetesGroups = slices.Clone(p.Credentials.KubernetesGroups)
	c.lru.Add(key, verifiedToken{p: p, exp: exp, checked: now, is: is, gen: gen})
}
