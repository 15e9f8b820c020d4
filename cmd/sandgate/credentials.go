package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"golang.org/x/oauth2"
)

// credentialsFile is the token cache: <user config dir>/sandgate/credentials.json
// (os.UserConfigDir: $XDG_CONFIG_HOME or ~/.config on Linux, ~/Library/Application Support
// on macOS, %AppData% on Windows), mode 0600 in a folder of mode 0700.
const credentialsFile = "credentials.json"

// store is the token cache: one sign-in per gateway, and the gateway signed in to last.
type store struct {
	// Current is the gateway of the last `sandgate login`, used when no other is named.
	Current string `json:"current,omitempty"`
	// Servers maps a gateway's base URL to its sign-in.
	Servers map[string]*signIn `json:"servers"`
}

// signIn is one gateway's cached sign-in: the issuer and client it came from (so the token
// can be refreshed without asking the gateway again) and the tokens.
type signIn struct {
	Issuer   string   `json:"issuer"`
	ClientID string   `json:"client_id"`
	TokenURL string   `json:"token_url"`
	Scopes   []string `json:"scopes,omitempty"`
	// Bearer is the token sent to the gateway: the ID token when the issuer gave one (the
	// gateway trusts the issuer with the client id among its audiences, as the web console
	// does), else the access token.
	Bearer       string    `json:"bearer"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	Expiry       time.Time `json:"expiry"`
	Subject      string    `json:"subject,omitempty"`
}

// configDir is the folder of the token cache.
func configDir() (string, error) {
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no folder for the token cache: %w", err)
	}
	return filepath.Join(d, "sandgate"), nil
}

// loadStore reads the token cache; an absent file is an empty cache.
func loadStore(_ env) (*store, error) {
	st := &store{Servers: map[string]*signIn{}}
	dir, err := configDir()
	if err != nil {
		return st, err
	}
	b, err := os.ReadFile(filepath.Join(dir, credentialsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, st); err != nil {
		return st, fmt.Errorf("token cache %s: %w (delete it and sign in again)", filepath.Join(dir, credentialsFile), err)
	}
	if st.Servers == nil {
		st.Servers = map[string]*signIn{}
	}
	return st, nil
}

// save writes the cache atomically (a temporary file renamed over it), readable by the
// user alone.
func (st *store) save() error {
	dir, err := configDir()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".credentials-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, credentialsFile))
}

// normalizeServer checks a gateway base URL and drops a trailing slash, so one gateway has
// one key in the cache.
func normalizeServer(s string) (string, error) {
	u, err := url.Parse(strings.TrimRight(s, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", usagef("the gateway URL %q is not an absolute http(s) URL", s)
	}
	return u.String(), nil
}

// expiryMargin: a token this close to its expiry is refreshed before use.
const expiryMargin = time.Minute

// errNotSignedIn says how to get a token.
func errNotSignedIn(server string) error {
	return fmt.Errorf("not signed in to %s: run `sandgate login` (or set SANDGATE_TOKEN)", server)
}

// cachedToken is the bearer token of one gateway from the cache, refreshed with its refresh
// token when it is about to expire and saved again.
type cachedToken struct {
	env    env
	server string
	http   *http.Client
	mu     sync.Mutex
	bearer string
	expiry time.Time
}

// token answers the bearer token (for client.WithTokenFunc).
func (c *cachedToken) token(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bearer != "" && time.Until(c.expiry) > expiryMargin {
		return c.bearer, nil
	}
	st, err := loadStore(c.env)
	if err != nil {
		return "", err
	}
	si := st.Servers[c.server]
	if si == nil {
		return "", errNotSignedIn(c.server)
	}
	if time.Until(si.Expiry) <= expiryMargin {
		if si.RefreshToken == "" {
			return "", fmt.Errorf("the sign-in to %s expired: run `sandgate login`", c.server)
		}
		if err := si.refresh(ctx, c.http); err != nil {
			return "", fmt.Errorf("the sign-in to %s expired and could not be refreshed (%w): run `sandgate login`", c.server, err)
		}
		if err := st.save(); err != nil {
			return "", fmt.Errorf("saving the refreshed token: %w", err)
		}
	}
	c.bearer, c.expiry = si.Bearer, si.Expiry
	return c.bearer, nil
}

// oauthConfig is the issuer's public client, as oauth2 needs it.
func (si *signIn) oauthConfig(ep oauth2.Endpoint) *oauth2.Config {
	ep.AuthStyle = oauth2.AuthStyleInParams // a public client: client_id in the form, no secret
	return &oauth2.Config{ClientID: si.ClientID, Endpoint: ep, Scopes: si.Scopes}
}

// refresh trades the refresh token for new tokens (RFC 6749 §6).
func (si *signIn) refresh(ctx context.Context, hc *http.Client) error {
	ctx = context.WithValue(ctx, oauth2.HTTPClient, hc)
	conf := si.oauthConfig(oauth2.Endpoint{TokenURL: si.TokenURL})
	tok, err := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: si.RefreshToken, Expiry: time.Unix(1, 0)}).Token()
	if err != nil {
		return err
	}
	return si.take(tok)
}

// take records a token answer: the bearer (the ID token when there is one), the refresh
// token (kept when the answer has no new one) and the expiry (the earlier of expires_in
// and the bearer's own exp claim).
func (si *signIn) take(tok *oauth2.Token) error {
	bearer := tok.AccessToken
	if id, ok := tok.Extra("id_token").(string); ok && id != "" {
		bearer = id
	}
	if bearer == "" {
		return errors.New("the issuer answered no token")
	}
	si.Bearer = bearer
	if tok.RefreshToken != "" {
		si.RefreshToken = tok.RefreshToken
	}
	si.Expiry = tok.Expiry
	if exp, sub, ok := jwtClaims(bearer); ok {
		if si.Expiry.IsZero() || exp.Before(si.Expiry) {
			si.Expiry = exp
		}
		si.Subject = sub
	}
	if si.Expiry.IsZero() {
		si.Expiry = time.Now().Add(time.Hour) // no expiry said: use it for an hour, then refresh
	}
	return nil
}

// jwtClaims reads exp and sub of a JWT without verifying it: only to know when to refresh
// and whom to name. The gateway verifies every token it is sent.
func jwtClaims(tok string) (exp time.Time, sub string, ok bool) {
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.PS256, jose.PS384, jose.PS512, jose.EdDSA})
	if err != nil {
		return time.Time{}, "", false
	}
	var c jwt.Claims
	if err := parsed.UnsafeClaimsWithoutVerification(&c); err != nil || c.Expiry == nil {
		return time.Time{}, "", false
	}
	return c.Expiry.Time(), c.Subject, true
}
