package auth_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/config"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testAudience is the audience every test issuer's tokens carry and every test Authenticator trusts.
const testAudience = "sandgate"

// testNow is the fixed instant the JWKS-server tests run at (auth.WithClock); go-oidc's own
// expiry check is disabled by the Authenticator, so this clock decides exp/nbf/iat alone.
var testNow = time.Date(2030, time.March, 1, 12, 0, 0, 0, time.UTC)

// RSA key generation is slow on a shared 2-core machine: each key is made once per process.
var (
	rsaKeyA = sync.OnceValue(func() *rsa.PrivateKey { return mustRSA() })
	rsaKeyB = sync.OnceValue(func() *rsa.PrivateKey { return mustRSA() })
	ecKey   = sync.OnceValue(func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		return k
	})
)

func mustRSA() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
}

// testKey is a signing key the test controls.
type testKey struct {
	kid string
	alg jose.SignatureAlgorithm
	key crypto.Signer
}

func keyA() testKey  { return testKey{kid: "key-a", alg: jose.RS256, key: rsaKeyA()} }
func keyB() testKey  { return testKey{kid: "key-b", alg: jose.RS256, key: rsaKeyB()} }
func keyEC() testKey { return testKey{kid: "key-ec", alg: jose.ES256, key: ecKey()} }

func (k testKey) jwk() jose.JSONWebKey {
	return jose.JSONWebKey{Key: k.key.Public(), KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"}
}

// sign serialises claims as a compact JWS signed with k (header kid = k.kid).
func (k testKey) sign(t testing.TB, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: k.key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", k.kid))
	require.NoError(t, err)
	payload, err := json.Marshal(claims)
	require.NoError(t, err)
	jws, err := signer.Sign(payload)
	require.NoError(t, err)
	raw, err := jws.CompactSerialize()
	require.NoError(t, err)
	return raw
}

// unsignedJWT builds header.payload. with whatever header the test wants (alg "none").
func unsignedJWT(t *testing.T, header, claims map[string]any) string {
	t.Helper()
	h, err := json.Marshal(header)
	require.NoError(t, err)
	p, err := json.Marshal(claims)
	require.NoError(t, err)
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(p) + "."
}

// jwksServer is a minimal OIDC issuer: discovery plus a JWKS whose keys (and failure modes)
// the test switches at will.
type jwksServer struct {
	srv *httptest.Server
	// base is the server's own URL (where discovery and the JWKS live); issuer is the `iss`
	// its discovery document advertises (base, unless the test serves a foreign issuer).
	base, issuer string

	mu   sync.Mutex
	keys []jose.JSONWebKey

	discoveryStatus atomic.Int32 // 0 = 200
	jwksStatus      atomic.Int32 // 0 = 200
	omitJWKSURI     atomic.Bool  // discovery without jwks_uri
	discoveryHits   atomic.Int32
	jwksHits        atomic.Int32
	lastAuthz       atomic.Value // string: Authorization header of the last request
}

// newJWKSServer starts an issuer serving keys; it is closed when the test ends.
func newJWKSServer(t testing.TB, keys ...testKey) *jwksServer {
	t.Helper()
	return startJWKSServer(t, false, "", keys...)
}

// startJWKSServer starts an issuer over TLS or not; advertised, when set, is the issuer its
// discovery document names instead of its own URL (a Kubernetes API server publishing the
// cluster's service-account issuer).
func startJWKSServer(t testing.TB, useTLS bool, advertised string, keys ...testKey) *jwksServer {
	t.Helper()
	s := &jwksServer{}
	s.setKeys(keys...)
	s.srv = httptest.NewUnstartedServer(nil)
	scheme := "http://"
	if useTLS {
		scheme = "https://"
	}
	s.base = scheme + s.srv.Listener.Addr().String()
	s.issuer = s.base
	if advertised != "" {
		s.issuer = advertised
	}
	s.srv.Config.Handler = s.handler()
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // TLS handshake failures are expected
	if useTLS {
		s.srv.StartTLS()
	} else {
		s.srv.Start()
	}
	t.Cleanup(s.srv.Close)
	return s
}

func (s *jwksServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		s.discoveryHits.Add(1)
		s.lastAuthz.Store(r.Header.Get("Authorization"))
		if st := s.discoveryStatus.Load(); st != 0 {
			http.Error(w, "discovery is down", int(st))
			return
		}
		doc := map[string]any{
			"issuer":                                s.issuer,
			"jwks_uri":                              s.base + "/jwks",
			"authorization_endpoint":                s.base + "/authorize",
			"token_endpoint":                        s.base + "/token",
			"response_types_supported":              []string{"code"},
			"subject_types_supported":               []string{"public"},
			"id_token_signing_alg_values_supported": []string{"RS256", "ES256"},
		}
		if s.omitJWKSURI.Load() {
			delete(doc, "jwks_uri")
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		s.jwksHits.Add(1)
		s.lastAuthz.Store(r.Header.Get("Authorization"))
		if st := s.jwksStatus.Load(); st != 0 {
			http.Error(w, "jwks is down", int(st))
			return
		}
		s.mu.Lock()
		set := jose.JSONWebKeySet{Keys: append([]jose.JSONWebKey(nil), s.keys...)}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(set)
	})
	return mux
}

// setKeys replaces the published key set (key rotation).
func (s *jwksServer) setKeys(keys ...testKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys = s.keys[:0]
	for _, k := range keys {
		s.keys = append(s.keys, k.jwk())
	}
}

// claims returns a valid claim set for this issuer at testNow; overrides replace entries and
// a nil override deletes the claim.
func (s *jwksServer) claims(overrides map[string]any) map[string]any {
	return stdClaims(s.issuer, testNow, overrides)
}

func stdClaims(iss string, now time.Time, overrides map[string]any) map[string]any {
	c := map[string]any{
		"iss":                iss,
		"sub":                "u-123",
		"aud":                testAudience,
		"iat":                now.Unix(),
		"nbf":                now.Unix(),
		"exp":                now.Add(time.Hour).Unix(),
		"preferred_username": "alice",
		"email":              "alice@example.test",
		"email_verified":     true,
		"groups":             []string{"dev", "ops"},
	}
	for k, v := range overrides {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	return c
}

// issuerConfig is the config.Issuer that trusts s with default mappings.
func (s *jwksServer) issuerConfig() config.Issuer {
	return config.Issuer{URL: s.issuer, Audiences: []string{testAudience}}
}

// newAuthenticator builds an Authenticator on cfg (30s skew unless set) running at testNow.
// Its context is cancelled when the test ends.
func newAuthenticator(t *testing.T, cfg config.Auth, opts ...auth.Option) *auth.Authenticator {
	t.Helper()
	if cfg.ClockSkew == 0 {
		cfg.ClockSkew = config.Duration(30 * time.Second)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	opts = append([]auth.Option{
		auth.WithClock(func() time.Time { return testNow }),
		auth.WithLogger(slog.New(slog.DiscardHandler)),
	}, opts...)
	a, err := auth.New(ctx, cfg, opts...)
	require.NoError(t, err)
	return a
}

// requireAuthError asserts err is an *auth.Error with code and a description holding every
// fragment.
func requireAuthError(t *testing.T, err error, code string, fragments ...string) *auth.Error {
	t.Helper()
	require.Error(t, err)
	require.NotErrorIs(t, err, auth.ErrIssuerUnavailable)
	var ae *auth.Error
	require.True(t, errors.As(err, &ae), "want *auth.Error, got %T: %v", err, err)
	require.Equal(t, code, ae.Code)
	require.Equal(t, ae.Description, ae.Error())
	for _, f := range fragments {
		require.Contains(t, ae.Description, f)
	}
	return ae
}
