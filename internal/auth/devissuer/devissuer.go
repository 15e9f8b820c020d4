// Package devissuer is the development OIDC issuer that `gateway dev` mounts on its own
// listener: discovery, JWKS, a token endpoint, the authorization-code + PKCE (RFC 7636,
// S256 only) flow a browser needs, the device authorization grant (RFC 8628) and refresh
// tokens (RFC 6749 §6) for command-line clients such as `sandgate login`. Its tokens are verified by the gateway through exactly the
// same go-oidc path as any production issuer; nothing here bypasses verification.
//
// It signs with an ES256 key kept in a PEM file so tokens minted by `gateway token` stay
// valid across restarts. It must never be mounted by `gateway serve`.
package devissuer

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Audience is the `aud` of every dev token; the dev configuration trusts exactly it.
const Audience = "sandgate"

// ClientID is the public client the web console uses for the authorization-code flow.
const ClientID = "sandgate-console"

// Issuer signs development tokens.
type Issuer struct {
	url     string
	key     *ecdsa.PrivateKey
	kid     string
	now     func() time.Time
	mu      sync.Mutex
	codes   map[string]authCode
	devices map[string]*deviceGrant // by device code
	refused []string                // groups the sign-in forms do not grant
}

// RefuseGroups makes the sign-in form refuse the groups (the gateway's admin groups, so that
// anyone who can reach a development gateway cannot simply sign in as an administrator).
// Mint, used by the operator's own commands and tests, is not affected.
func (i *Issuer) RefuseGroups(groups []string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.refused = slices.Clone(groups)
}

type authCode struct {
	claims    Claims
	challenge string
	redirect  string
	expires   time.Time
}

// Claims are what a dev token asserts.
type Claims struct {
	Subject string
	Groups  []string
	Email   string
	TTL     time.Duration // default 12h
}

// Open loads the signing key from keyFile, creating it (mode 0600) when absent, for issuer URL
// issuerURL (e.g. "http://localhost:8080/dev/oidc").
func Open(issuerURL, keyFile string) (*Issuer, error) {
	key, err := loadOrCreateKey(keyFile)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(der)
	return &Issuer{url: strings.TrimSuffix(issuerURL, "/"), key: key, kid: hex.EncodeToString(sum[:8]), now: time.Now, codes: map[string]authCode{}, devices: map[string]*deviceGrant{}}, nil
}

// Load is Open for a key that must exist already (`gateway token` minting for a running dev
// gateway): it never creates one. A missing file is an error wrapping os.ErrNotExist.
func Load(issuerURL, keyFile string) (*Issuer, error) {
	if _, err := os.Stat(keyFile); err != nil {
		return nil, fmt.Errorf("devissuer: no signing key at %s: %w", keyFile, err)
	}
	return Open(issuerURL, keyFile)
}

// KeyID is the key id ("kid") of the issuer's signing key, as its JWKS lists it.
func (i *Issuer) KeyID() string { return i.kid }

func loadOrCreateKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("devissuer: %s holds no PEM key; delete it to create a new one", path)
		}
		return x509.ParseECPrivateKey(blk.Bytes)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	return key, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// URL is the issuer identifier.
func (i *Issuer) URL() string { return i.url }

// Mint returns a signed JWT for c.
func (i *Issuer) Mint(c Claims) (string, error) {
	if c.Subject == "" {
		return "", errors.New("devissuer: subject is required")
	}
	if c.TTL <= 0 {
		c.TTL = 12 * time.Hour
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: i.key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", i.kid))
	if err != nil {
		return "", err
	}
	now := i.now()
	std := jwt.Claims{
		Issuer: i.url, Subject: c.Subject, Audience: jwt.Audience{Audience},
		IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(c.TTL)),
	}
	extra := map[string]any{"groups": c.Groups, "preferred_username": c.Subject, "azp": ClientID}
	if c.Groups == nil {
		extra["groups"] = []string{}
	}
	if c.Email != "" {
		extra["email"] = c.Email
		extra["email_verified"] = true
	}
	return jwt.Signed(signer).Claims(std).Claims(extra).Serialize()
}

// Handler serves the issuer's endpoints under its URL path (mount it at that path prefix with
// the prefix stripped).
func (i *Issuer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", i.discovery)
	mux.HandleFunc("GET /jwks", i.jwks)
	mux.HandleFunc("GET /authorize", i.authorizeForm)
	mux.HandleFunc("POST /authorize", i.authorize)
	mux.HandleFunc("POST /token", i.token)
	mux.HandleFunc("POST /device_authorization", i.deviceAuthorization)
	mux.HandleFunc("GET /device", i.deviceForm)
	mux.HandleFunc("POST /device", i.deviceApprove)
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (i *Issuer) discovery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                i.url,
		"jwks_uri":                              i.url + "/jwks",
		"authorization_endpoint":                i.url + "/authorize",
		"token_endpoint":                        i.url + "/token",
		"response_types_supported":              []string{"code"},
		"grant_types_supported":                 []string{"authorization_code", "refresh_token", grantDeviceCode},
		"device_authorization_endpoint":         i.url + "/device_authorization",
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"ES256"},
		"code_challenge_methods_supported":      []string{"S256"},
		"token_endpoint_auth_methods_supported": []string{"none"},
		"scopes_supported":                      []string{"openid", "profile", "email", "groups", "offline_access"},
		"claims_supported":                      []string{"sub", "email", "groups", "preferred_username"},
	})
}

func (i *Issuer) jwks(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &i.key.PublicKey, KeyID: i.kid, Algorithm: "ES256", Use: "sig"}}})
}

// pageHead opens the issuer's pages: the console's favicon and a style of their own (inline:
// the pages are served on their own, outside the console's stylesheet), light and dark.
const pageHead = `<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><meta name="color-scheme" content="light dark">
<title>Sandgate dev sign-in</title><link rel="icon" href="/console/favicon.svg" type="image/svg+xml">
<style>
:root{--bg:#f6f7f9;--panel:#fff;--text:#1b1f24;--muted:#5b6470;--line:#d8dde3;--accent:#2457c5;--accent-text:#fff;--warn:#8a4b00;--warn-bg:#fff1d6;
font-family:system-ui,-apple-system,"Segoe UI",sans-serif;font-size:15px;line-height:1.45;color:var(--text);background:var(--bg)}
@media (prefers-color-scheme:dark){:root{--bg:#14171b;--panel:#1c2026;--text:#e4e7eb;--muted:#9aa4b1;--line:#343a43;--accent:#6d9cff;--accent-text:#0b1020;--warn:#ffc266;--warn-bg:#3a2a0e}}
*{box-sizing:border-box}body{margin:0;padding:1rem}
main{max-width:26rem;margin:3rem auto;background:var(--panel);border:1px solid var(--line);border-radius:8px;padding:1.6rem 1.6rem 1.4rem;box-shadow:0 2px 10px rgb(0 0 0 / 6%)}
.brand{display:flex;align-items:center;gap:.5rem;font-weight:700;margin-bottom:1rem}.brand img{width:28px;height:28px}
h1{font-size:1.3rem;margin:0 0 .4rem}p{margin:.4rem 0 1rem;color:var(--muted)}
.dev{display:inline-block;background:var(--warn-bg);color:var(--warn);border:1px solid var(--warn);border-radius:999px;padding:0 .5rem;font-size:.8em;font-weight:600}
label{display:block;margin:0 0 .9rem;font-weight:600;font-size:.9em}
input{display:block;width:100%;margin-top:.25rem;padding:.5rem .6rem;font:inherit;font-weight:400;color:var(--text);background:var(--bg);border:1px solid var(--line);border-radius:6px}
input:focus-visible,button:focus-visible{outline:3px solid var(--accent);outline-offset:2px}
button{width:100%;margin-top:.4rem;padding:.6rem;font:inherit;font-weight:600;color:var(--accent-text);background:var(--accent);border:0;border-radius:6px;cursor:pointer}
button:hover{filter:brightness(1.08)}code{font-size:.92em}
</style></head>
<body><main><div class="brand"><img src="/console/favicon.svg" alt="">Sandgate <span class="dev">development issuer</span></div>`

var formTmpl = template.Must(template.New("f").Parse(pageHead + `<h1>Sign in</h1>
<p>This issuer exists only under <code>gateway dev</code>: no password, pick who you are.</p>
<form method="post"><input type="hidden" name="q" value="{{.Q}}">
<label>Subject <input name="sub" value="dev" required pattern="[A-Za-z0-9._@-]{1,64}" autocomplete="username" autofocus></label>
<label>Groups (comma-separated) <input name="groups" value="dev"></label>
<label>Email <input name="email" type="email" value="dev@example.test"></label>
<button type="submit">Sign in</button></form></main></body></html>`))

type authRequest struct {
	clientID, redirect, state, challenge, method, responseType string
}

func parseAuthRequest(q url.Values) (authRequest, error) {
	ar := authRequest{q.Get("client_id"), q.Get("redirect_uri"), q.Get("state"), q.Get("code_challenge"), q.Get("code_challenge_method"), q.Get("response_type")}
	switch {
	case ar.responseType != "code":
		return ar, errors.New("response_type must be 'code'")
	case ar.clientID != ClientID:
		return ar, fmt.Errorf("unknown client_id; the dev issuer knows %q", ClientID)
	case ar.challenge == "" || ar.method != "S256":
		return ar, errors.New("PKCE is required: send code_challenge with code_challenge_method=S256")
	}
	u, err := url.Parse(ar.redirect)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ar, errors.New("redirect_uri must be an absolute http(s) URL")
	}
	// A development issuer only redirects to the local machine.
	if h := u.Hostname(); h != "localhost" && h != "127.0.0.1" && h != "::1" {
		return ar, errors.New("redirect_uri must point to localhost")
	}
	return ar, nil
}

func (i *Issuer) authorizeForm(w http.ResponseWriter, r *http.Request) {
	if _, err := parseAuthRequest(r.URL.Query()); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = formTmpl.Execute(w, map[string]string{"Q": r.URL.RawQuery})
}

func (i *Issuer) authorize(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q, err := url.ParseQuery(r.PostForm.Get("q"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ar, err := parseAuthRequest(q)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	sub := strings.TrimSpace(r.PostForm.Get("sub"))
	if sub == "" {
		http.Error(w, "subject is required", http.StatusBadRequest)
		return
	}
	var groups []string
	for _, g := range strings.Split(r.PostForm.Get("groups"), ",") {
		if g = strings.TrimSpace(g); g != "" {
			groups = append(groups, g)
		}
	}
	i.mu.Lock()
	refused := slices.Clone(i.refused)
	i.mu.Unlock()
	for _, g := range groups {
		if slices.Contains(refused, g) {
			http.Error(w, "group '"+g+"' is an administrator group of this gateway; restart `gateway dev` with --allow-admin to sign in with it", http.StatusForbidden)
			return
		}
	}
	code := rand.Text()
	i.mu.Lock()
	for k, c := range i.codes { // drop expired codes
		if i.now().After(c.expires) {
			delete(i.codes, k)
		}
	}
	i.codes[code] = authCode{claims: Claims{Subject: sub, Groups: groups, Email: r.PostForm.Get("email")}, challenge: ar.challenge, redirect: ar.redirect, expires: i.now().Add(time.Minute)}
	i.mu.Unlock()
	u, _ := url.Parse(ar.redirect)
	rq := u.Query()
	rq.Set("code", code)
	if ar.state != "" {
		rq.Set("state", ar.state)
	}
	u.RawQuery = rq.Encode()
	http.Redirect(w, r, u.String(), http.StatusFound)
}

func tokenError(w http.ResponseWriter, code, desc string) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": code, "error_description": desc})
}

func (i *Issuer) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		tokenError(w, "invalid_request", err.Error())
		return
	}
	f := r.PostForm
	switch f.Get("grant_type") {
	case "authorization_code":
		i.tokenFromCode(w, f)
	case "refresh_token":
		i.tokenFromRefresh(w, f)
	case grantDeviceCode:
		i.tokenFromDevice(w, f)
	default:
		tokenError(w, "unsupported_grant_type", "supported grants: authorization_code, refresh_token, "+grantDeviceCode)
	}
}

func (i *Issuer) tokenFromCode(w http.ResponseWriter, f url.Values) {
	i.mu.Lock()
	c, ok := i.codes[f.Get("code")]
	delete(i.codes, f.Get("code")) // single use
	i.mu.Unlock()
	if !ok || i.now().After(c.expires) {
		tokenError(w, "invalid_grant", "unknown, used or expired code")
		return
	}
	if f.Get("client_id") != ClientID || f.Get("redirect_uri") != c.redirect {
		tokenError(w, "invalid_grant", "client_id or redirect_uri does not match the authorization request")
		return
	}
	sum := sha256.Sum256([]byte(f.Get("code_verifier")))
	if base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge {
		tokenError(w, "invalid_grant", "code_verifier does not match code_challenge")
		return
	}
	i.issue(w, c.claims)
}

// issue answers a token request with an ID/access token for c (the same JWT: the gateway
// takes either) and a refresh token.
func (i *Issuer) issue(w http.ResponseWriter, c Claims) {
	tok, err := i.Mint(c)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "server_error", "error_description": err.Error()})
		return
	}
	refresh, err := i.mintRefresh(c)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "server_error", "error_description": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"access_token": tok, "id_token": tok, "refresh_token": refresh, "token_type": "Bearer", "expires_in": int((12 * time.Hour).Seconds())})
}
