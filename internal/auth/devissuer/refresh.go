package devissuer

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// RefreshTTL is how long a refresh token is good for.
const RefreshTTL = 30 * 24 * time.Hour

// refreshUse marks a refresh token's claims; its audience is the token endpoint, so the
// gateway (which wants Audience) refuses it as a bearer token.
const refreshUse = "refresh"

type refreshClaims struct {
	Use    string   `json:"token_use"`
	Groups []string `json:"groups"`
	Email  string   `json:"email,omitempty"`
	Client string   `json:"azp"`
}

// mintRefresh signs a refresh token for c: stateless (nothing to store, valid across
// restarts of `gateway dev` while its key file stays), good for RefreshTTL.
func (i *Issuer) mintRefresh(c Claims) (string, error) {
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: i.key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", i.kid))
	if err != nil {
		return "", err
	}
	now := i.now()
	std := jwt.Claims{
		Issuer: i.url, Subject: c.Subject, Audience: jwt.Audience{i.url + "/token"},
		IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(RefreshTTL)),
	}
	return jwt.Signed(signer).Claims(std).Claims(refreshClaims{Use: refreshUse, Groups: c.Groups, Email: c.Email, Client: ClientID}).Serialize()
}

// tokenFromRefresh answers grant_type=refresh_token: a refresh token this issuer signed,
// unexpired, of the client asking, gives new tokens for the same subject, groups and email
// (and a new refresh token). Groups the sign-in forms refuse now are refused here too.
func (i *Issuer) tokenFromRefresh(w http.ResponseWriter, f url.Values) {
	c, err := i.parseRefresh(f.Get("refresh_token"))
	if err != nil {
		tokenError(w, "invalid_grant", err.Error())
		return
	}
	if f.Get("client_id") != "" && f.Get("client_id") != ClientID {
		tokenError(w, "invalid_grant", "the refresh token was issued to another client")
		return
	}
	if g := i.refusedGroup(c.Groups); g != "" {
		tokenError(w, "invalid_grant", "group '"+g+"' is an administrator group of this gateway")
		return
	}
	i.issue(w, c)
}

func (i *Issuer) parseRefresh(tok string) (Claims, error) {
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		return Claims{}, errors.New("malformed refresh token")
	}
	var std jwt.Claims
	var extra refreshClaims
	if err := parsed.Claims(&i.key.PublicKey, &std, &extra); err != nil {
		return Claims{}, errors.New("refresh token not signed by this issuer")
	}
	if err := std.ValidateWithLeeway(jwt.Expected{Issuer: i.url, AnyAudience: jwt.Audience{i.url + "/token"}, Time: i.now()}, 0); err != nil {
		return Claims{}, errors.New("refresh token expired or not for this issuer: " + err.Error())
	}
	if extra.Use != refreshUse || std.Subject == "" {
		return Claims{}, errors.New("not a refresh token")
	}
	return Claims{Subject: std.Subject, Groups: extra.Groups, Email: extra.Email}, nil
}

// refusedGroup is the first of groups the sign-in forms refuse, or "".
func (i *Issuer) refusedGroup(groups []string) string {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, g := range groups {
		if slices.Contains(i.refused, g) {
			return g
		}
	}
	return ""
}
