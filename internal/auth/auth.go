// Package auth verifies `Authorization: Bearer <JWT>` tokens (RFC 6750) against the configured
// OIDC issuers with go-oidc — discovery, JWKS cached and refreshed on an unknown `kid`,
// audience, expiry with a small skew, allowed asymmetric signing algorithms — and resolves the
// verified claims into a principal.Principal through the issuer's claim mappings.
//
// The same bearer credential may be a Sandgate API key (internal/apikey; keys.go): it is told
// apart by its prefix, read from the store by its secret's hash (at most once a second per
// replica) and authenticates as the principal that made it.
//
// Any issuer that serves OIDC discovery works, including a Kubernetes service-account issuer
// (set ca_file and, where discovery needs it, bearer_token_file).
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sandgate/sandgate/internal/apikey"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/principal"
)

// Error is a rejected credential. Code is the RFC 6750 error code ("invalid_token", or ""
// when no token was presented); Description says what is wrong and what to do.
type Error struct {
	Code        string
	Description string
	// Reason is the failure's class for metrics (one of the Reason* constants).
	Reason string
}

// Reasons a request fails authentication (the auth failures metric's `reason` label,
// docs/semantics.md §14). A fixed set: never the token, issuer or subject.
const (
	ReasonMissing             = "missing"              // no Authorization header
	ReasonMalformed           = "malformed"            // not `Bearer <credential>`, or neither a JWT nor an API key
	ReasonUntrustedIssuer     = "untrusted_issuer"     // `iss` names no configured issuer
	ReasonSignature           = "signature"            // the signature (or algorithm) did not verify
	ReasonExpired             = "expired"              // past `exp`, or no `exp`; an API key past its expiry
	ReasonNotYetValid         = "not_yet_valid"        // before `nbf`, or issued in the future
	ReasonAudience            = "audience"             // `aud` names none of the issuer's audiences
	ReasonClaims              = "claims"               // claim mappings or validation rules refused it
	ReasonIssuerUnavailable   = "issuer_unavailable"   // discovery or keys could not be fetched (503)
	ReasonPrincipalUnrecorded = "principal_unrecorded" // the principal could not be recorded (503)
	ReasonUnknownKey          = "unknown_key"          // an API key no key of this gateway has
	ReasonRevoked             = "revoked"              // an API key that was revoked
	ReasonKeysUnavailable     = "keys_unavailable"     // an API key could not be read from the store (503)
)

func (e *Error) Error() string { return e.Description }

// ErrIssuerUnavailable means an issuer's discovery document or keys could not be fetched; the
// token was neither accepted nor proven bad (the edge answers 503).
var ErrIssuerUnavailable = errors.New("issuer unavailable")

func invalid(reason, format string, args ...any) error {
	return &Error{Code: "invalid_token", Description: fmt.Sprintf(format, args...), Reason: reason}
}

// Authenticator verifies bearer tokens. Build it with New; safe for concurrent use.
type Authenticator struct {
	issuers map[string]*issuer
	skew    time.Duration
	now     func() time.Time
	log     *slog.Logger
	// bgCtx lives as long as the Authenticator; go-oidc uses it for JWKS refreshes.
	bgCtx context.Context
	// verified remembers tokens that verified (cache.go).
	verified *verifiedCache
	failed   func(reason string) // WithFailureObserver
	tracer   trace.Tracer        // WithTracerProvider
	// keys authenticates API keys (WithAPIKeys; keys.go); nil: none are accepted.
	keys *keyVerifier
	// adminGroups are auth.admin_groups, for the principals of API keys.
	adminGroups []string
}

type issuer struct {
	cfg    config.Issuer
	mapper *principal.Mapper
	client *http.Client
	algs   []string

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier
	lastErr  time.Time
	// keysGen counts the changes of the issuer's key set (jwks.go): a token verified under
	// an older set is verified again.
	keysGen atomic.Uint64
}

// Option adjusts an Authenticator.
type Option func(*Authenticator)

// WithClock injects the clock used for expiry checks (tests).
func WithClock(now func() time.Time) Option { return func(a *Authenticator) { a.now = now } }

// WithFailureObserver has observe told the Reason of every request Middleware refuses
// (metrics). It must not block.
func WithFailureObserver(observe func(reason string)) Option {
	return func(a *Authenticator) { a.failed = observe }
}

// WithTracerProvider makes Middleware trace each authentication as a span auth.authenticate
// (default: none).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(a *Authenticator) { a.tracer = tp.Tracer("github.com/sandgate/sandgate/internal/auth") }
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(a *Authenticator) { a.log = l } }

// New builds an Authenticator for cfg. Discovery is lazy (first token of each issuer), so an
// issuer that starts later — such as the dev issuer on the same listener — is fine. ctx bounds
// the life of background key refreshes. Errors are configuration errors (bad CEL, CA file).
func New(ctx context.Context, cfg config.Auth, opts ...Option) (*Authenticator, error) {
	a := &Authenticator{issuers: map[string]*issuer{}, skew: cfg.ClockSkew.D(), now: time.Now, log: slog.Default(), bgCtx: ctx, verified: newVerifiedCache(),
		failed: func(string) {}, tracer: noop.NewTracerProvider().Tracer(""), adminGroups: slices.Clone(cfg.AdminGroups)}
	for _, o := range opts {
		o(a)
	}
	if len(cfg.Issuers) == 0 {
		return nil, errors.New("auth: no issuer configured (auth.issuers); `gateway dev` provides a development issuer")
	}
	for _, ic := range cfg.Issuers {
		m, err := principal.NewMapper(ic, cfg.AdminGroups)
		if err != nil {
			return nil, err
		}
		client, err := httpClient(ic)
		if err != nil {
			return nil, err
		}
		algs := ic.SigningAlgorithms
		if len(algs) == 0 {
			algs = []string{oidc.RS256, oidc.ES256}
		}
		a.issuers[ic.URL] = &issuer{cfg: ic, mapper: m, client: client, algs: algs}
	}
	return a, nil
}

func httpClient(ic config.Issuer) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if ic.CAFile != "" {
		pem, err := os.ReadFile(ic.CAFile)
		if err != nil {
			return nil, fmt.Errorf("auth.issuers[%s].ca_file: %w", ic.URL, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("auth.issuers[%s].ca_file: no PEM certificate in %s", ic.URL, ic.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	var rt http.RoundTripper = tr
	if ic.BearerTokenFile != "" {
		rt = &bearerTransport{file: ic.BearerTokenFile, next: tr}
	}
	return &http.Client{Transport: rt, Timeout: 15 * time.Second}, nil
}

// bearerTransport sends the (re-read, since projected tokens rotate) token file's content.
type bearerTransport struct {
	file string
	next http.RoundTripper
}

func (b *bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	tok, err := os.ReadFile(b.file)
	if err != nil {
		return nil, fmt.Errorf("read bearer_token_file: %w", err)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	return b.next.RoundTrip(r)
}

// verifier returns the issuer's verifier, running discovery on first use. A failed discovery
// is retried at most once per second.
func (a *Authenticator) verifier(is *issuer) (*oidc.IDTokenVerifier, error) {
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.verifier != nil {
		return is.verifier, nil
	}
	if time.Since(is.lastErr) < time.Second {
		return nil, fmt.Errorf("%w: discovery for %s failed moments ago", ErrIssuerUnavailable, is.cfg.URL)
	}
	docURL := strings.TrimSuffix(is.cfg.URL, "/") + "/.well-known/openid-configuration"
	if is.cfg.DiscoveryURL != "" {
		docURL = is.cfg.DiscoveryURL // the exact document, as in Kubernetes' JWTAuthenticator
	}
	jwksURL, err := a.discover(is, docURL)
	if err != nil {
		is.lastErr = time.Now()
		a.log.Warn("oidc discovery failed", "issuer", is.cfg.URL, "discovery", docURL, "err", err)
		return nil, fmt.Errorf("%w: discovery for %s: %v", ErrIssuerUnavailable, is.cfg.URL, err)
	}
	// The key set's own client: its refetches are rate-limited (jwks.go).
	throttle := newJWKSThrottle(is.client.Transport)
	throttle.onChange = func() { is.keysGen.Add(1) }
	keyClient := &http.Client{Transport: throttle, Timeout: is.client.Timeout}
	keys := oidc.NewRemoteKeySet(oidc.ClientContext(a.bgCtx, keyClient), jwksURL)
	is.verifier = oidc.NewVerifier(is.cfg.URL, keys, &oidc.Config{
		SkipClientIDCheck:    true, // audiences are checked below (several may be allowed)
		SkipExpiryCheck:      true, // checked below with the configured skew
		SupportedSigningAlgs: is.algs,
	})
	return is.verifier, nil
}

// discover fetches the OpenID discovery document at docURL and returns its jwks_uri. The
// document's issuer must be the configured issuer (OpenID Connect Discovery 1.0 §4.3).
func (a *Authenticator) discover(is *issuer, docURL string) (string, error) {
	ctx, cancel := context.WithTimeout(a.bgCtx, 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, docURL, nil)
	if err != nil {
		return "", err
	}
	resp, err := is.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", docURL, resp.Status)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&doc); err != nil {
		return "", fmt.Errorf("GET %s: not a discovery document: %v", docURL, err)
	}
	if doc.Issuer != is.cfg.URL {
		return "", fmt.Errorf("discovery document at %s names issuer %q, not %q", docURL, doc.Issuer, is.cfg.URL)
	}
	if doc.JWKSURI == "" {
		return "", fmt.Errorf("discovery document at %s has no jwks_uri", docURL)
	}
	return doc.JWKSURI, nil
}

// Authenticate verifies raw (the bearer credential, without "Bearer ") and resolves its
// principal: an API key (it starts with apikey.Prefix) through AuthenticateAPIKey, anything
// else as a JWT. A token that verified is remembered (by its SHA-256) until it expires, for at
// most verifiedTTL, and while its issuer's key set is unchanged, so the signature check and
// the claim mappings run once per token, not once per request.
// Errors: *Error for a bad token or key (401), ErrIssuerUnavailable or ErrKeysUnavailable
// (503).
func (a *Authenticator) Authenticate(ctx context.Context, raw string) (principal.Principal, error) {
	if apikey.Is(raw) {
		return a.AuthenticateAPIKey(ctx, raw)
	}
	key := sha256.Sum256([]byte(raw))
	if p, ok := a.verified.get(key, a.now(), a.skew); ok {
		return p, nil
	}
	p, exp, is, gen, err := a.verify(ctx, raw)
	if err != nil {
		return principal.Principal{}, err
	}
	a.verified.add(key, p, exp, a.now(), is, gen)
	return p, nil
}

// verify verifies raw and resolves its principal; it also returns the token's expiry and its
// issuer with the key set generation read before the signature was checked (so a token
// verified while the keys changed is verified again next time).
func (a *Authenticator) verify(ctx context.Context, raw string) (_ principal.Principal, exp time.Time, _ *issuer, gen uint64, _ error) {
	iss, err := unverifiedIssuer(raw)
	if err != nil {
		return principal.Principal{}, exp, nil, 0, err
	}
	is, ok := a.issuers[iss]
	if !ok {
		return principal.Principal{}, exp, nil, 0, invalid(ReasonUntrustedIssuer, "token issuer %q is not trusted by this gateway", iss)
	}
	v, err := a.verifier(is)
	if err != nil {
		return principal.Principal{}, exp, nil, 0, err
	}
	gen = is.keysGen.Load()
	tok, err := v.Verify(ctx, raw)
	if err != nil {
		if strings.Contains(err.Error(), "fetching keys") {
			return principal.Principal{}, exp, nil, 0, fmt.Errorf("%w: %v", ErrIssuerUnavailable, err)
		}
		return principal.Principal{}, exp, nil, 0, invalid(ReasonSignature, "token verification failed: %v", err)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return principal.Principal{}, exp, nil, 0, invalid(ReasonMalformed, "token claims are not a JSON object: %v", err)
	}
	if err := a.checkTimes(claims); err != nil {
		return principal.Principal{}, exp, nil, 0, err
	}
	if !slices.ContainsFunc(tok.Audience, func(aud string) bool { return slices.Contains(is.cfg.Audiences, aud) }) {
		return principal.Principal{}, exp, nil, 0, invalid(ReasonAudience, "token audience %v does not include one of %v", tok.Audience, is.cfg.Audiences)
	}
	p, err := is.mapper.Map(claims)
	if err != nil {
		return principal.Principal{}, exp, nil, 0, invalid(ReasonClaims, "%v", err)
	}
	return p, tok.Expiry, is, gen, nil
}

func (a *Authenticator) checkTimes(claims map[string]any) error {
	now := a.now()
	num := func(k string) (time.Time, bool) {
		f, ok := claims[k].(float64)
		if !ok {
			return time.Time{}, false
		}
		return time.Unix(int64(f), 0), true
	}
	exp, ok := num("exp")
	if !ok {
		return invalid(ReasonExpired, "token has no 'exp' claim; tokens must expire")
	}
	if now.After(exp.Add(a.skew)) {
		return invalid(ReasonExpired, "token expired at %s; request a new token from your issuer", exp.UTC().Format(time.RFC3339))
	}
	if nbf, ok := num("nbf"); ok && now.Add(a.skew).Before(nbf) {
		return invalid(ReasonNotYetValid, "token is not valid before %s", nbf.UTC().Format(time.RFC3339))
	}
	if iat, ok := num("iat"); ok && now.Add(a.skew).Before(iat) {
		return invalid(ReasonNotYetValid, "token was issued in the future (%s); check the issuer's clock", iat.UTC().Format(time.RFC3339))
	}
	return nil
}

// unverifiedIssuer reads `iss` from the payload to pick the verifier; nothing is trusted
// until that verifier has checked the signature.
func unverifiedIssuer(raw string) (string, error) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return "", invalid(ReasonMalformed, "malformed token: a JWT has three dot-separated parts (JWE is not accepted)")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", invalid(ReasonMalformed, "malformed token payload: %v", err)
	}
	var c struct {
		Iss string `json:"iss"`
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return "", invalid(ReasonMalformed, "malformed token payload: %v", err)
	}
	if c.Iss == "" {
		return "", invalid(ReasonMalformed, "token has no 'iss' claim")
	}
	return c.Iss, nil
}
