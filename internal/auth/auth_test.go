package auth_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/principal"
)

// hmacWithPublicKey is the classic algorithm-confusion attack: an HS256 token whose HMAC secret
// is the issuer's published RSA public key (PEM), carrying the issuer's kid.
func hmacWithPublicKey(t *testing.T, claims map[string]any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(rsaKeyA().Public())
	require.NoError(t, err)
	secret := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: secret},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", keyA().kid))
	require.NoError(t, err)
	payload, err := json.Marshal(claims)
	require.NoError(t, err)
	jws, err := signer.Sign(payload)
	require.NoError(t, err)
	raw, err := jws.CompactSerialize()
	require.NoError(t, err)
	return raw
}

// tamper swaps the payload of a signed token for claims, keeping header and signature.
func tamper(t *testing.T, raw string, claims map[string]any) string {
	t.Helper()
	parts := strings.Split(raw, ".")
	require.Len(t, parts, 3)
	p, err := json.Marshal(claims)
	require.NoError(t, err)
	parts[1] = base64.RawURLEncoding.EncodeToString(p)
	return strings.Join(parts, ".")
}

func TestAuthenticateEdgeCases(t *testing.T) {
	t.Parallel()

	type testCase struct {
		name string
		// token builds the bearer token against the test's issuer.
		token func(t *testing.T, s *jwksServer) string
		// issuer adjusts the trusted issuer's configuration.
		issuer func(ic *config.Issuer)
		// wantDesc: fragments of the *auth.Error description; empty means the token is accepted.
		wantDesc []string
	}
	signA := func(overrides map[string]any) func(*testing.T, *jwksServer) string {
		return func(t *testing.T, s *jwksServer) string { return keyA().sign(t, s.claims(overrides)) }
	}
	at := func(d time.Duration) int64 { return testNow.Add(d).Unix() }

	tests := []testCase{
		{name: "Valid", token: signA(nil)},
		{name: "ValidES256", token: func(t *testing.T, s *jwksServer) string { return keyEC().sign(t, s.claims(nil)) }},
		{name: "AudienceListContainingOurs", token: signA(map[string]any{"aud": []string{"other", testAudience}})},
		{name: "SecondConfiguredAudience", token: signA(map[string]any{"aud": "console"}), issuer: func(ic *config.Issuer) { ic.Audiences = []string{testAudience, "console"} }},
		{name: "NoNbfNoIat", token: signA(map[string]any{"nbf": nil, "iat": nil})},
		{
			name:     "Expired",
			token:    signA(map[string]any{"exp": at(-time.Minute), "iat": at(-2 * time.Hour), "nbf": at(-2 * time.Hour)}),
			wantDesc: []string{"token expired at 2030-03-01T11:59:00Z", "request a new token"},
		},
		{name: "ExpiredWithinSkew", token: signA(map[string]any{"exp": at(-20 * time.Second), "iat": at(-time.Hour), "nbf": at(-time.Hour)})},
		{
			name:     "NotYetValidBeyondSkew",
			token:    signA(map[string]any{"nbf": at(time.Minute)}),
			wantDesc: []string{"token is not valid before 2030-03-01T12:01:00Z"},
		},
		{name: "NotYetValidWithinSkew", token: signA(map[string]any{"nbf": at(20 * time.Second), "iat": at(20 * time.Second)})},
		{
			name:     "IssuedInTheFuture",
			token:    signA(map[string]any{"iat": at(10 * time.Minute)}),
			wantDesc: []string{"issued in the future", "2030-03-01T12:10:00Z", "check the issuer's clock"},
		},
		{
			name:     "UntrustedIssuer",
			token:    signA(map[string]any{"iss": "https://evil.example"}),
			wantDesc: []string{`token issuer "https://evil.example" is not trusted by this gateway`},
		},
		{
			name: "IssuerWithTrailingSlashIsAnotherIssuer",
			token: func(t *testing.T, s *jwksServer) string {
				return keyA().sign(t, s.claims(map[string]any{"iss": s.issuer + "/"}))
			},
			wantDesc: []string{"is not trusted by this gateway"},
		},
		{
			name:     "WrongAudience",
			token:    signA(map[string]any{"aud": "someone-else"}),
			wantDesc: []string{"token audience [someone-else] does not include one of [sandgate]"},
		},
		{
			name: "AlgNone",
			token: func(t *testing.T, s *jwksServer) string {
				return unsignedJWT(t, map[string]any{"alg": "none", "typ": "JWT", "kid": keyA().kid}, s.claims(nil))
			},
			wantDesc: []string{"token verification failed", `unexpected signature algorithm "none"`},
		},
		{
			name:     "HS256WithPublicKeyAsSecret",
			token:    func(t *testing.T, s *jwksServer) string { return hmacWithPublicKey(t, s.claims(nil)) },
			wantDesc: []string{"token verification failed", `unexpected signature algorithm "HS256"`},
		},
		{
			// Configuration validation refuses HMAC algorithms; even if one slipped through, an
			// HMAC token cannot verify against asymmetric JWKS keys.
			name:     "HS256WithPublicKeyAsSecretEvenIfHS256Allowed",
			token:    func(t *testing.T, s *jwksServer) string { return hmacWithPublicKey(t, s.claims(nil)) },
			issuer:   func(ic *config.Issuer) { ic.SigningAlgorithms = []string{"RS256", "HS256"} },
			wantDesc: []string{"token verification failed", "failed to verify signature"},
		},
		{
			name:     "ES256NotInSigningAlgorithms",
			token:    func(t *testing.T, s *jwksServer) string { return keyEC().sign(t, s.claims(nil)) },
			issuer:   func(ic *config.Issuer) { ic.SigningAlgorithms = []string{"RS256"} },
			wantDesc: []string{`unexpected signature algorithm "ES256"`},
		},
		{
			name:     "UnknownKid",
			token:    func(t *testing.T, s *jwksServer) string { return keyB().sign(t, s.claims(nil)) },
			wantDesc: []string{"token verification failed", "failed to verify id token signature"},
		},
		{
			name: "KnownKidWrongKey",
			token: func(t *testing.T, s *jwksServer) string {
				k := keyB()
				k.kid = keyA().kid
				return k.sign(t, s.claims(nil))
			},
			wantDesc: []string{"failed to verify id token signature"},
		},
		{
			name: "TamperedPayload",
			token: func(t *testing.T, s *jwksServer) string {
				return tamper(t, keyA().sign(t, s.claims(nil)), s.claims(map[string]any{"sub": "root", "groups": []string{"admins"}}))
			},
			wantDesc: []string{"failed to verify id token signature"},
		},
		{
			name:     "MissingSub",
			token:    signA(map[string]any{"sub": nil}),
			wantDesc: []string{"claims rejected", "the token has no 'sub' claim"},
		},
		{
			name:     "SubWithNUL",
			token:    signA(map[string]any{"sub": "alice\x00admin"}),
			wantDesc: []string{"claims rejected", "'sub' claim contains the control character U+0000 at byte 5"},
		},
		{
			name:     "SubTooLong",
			token:    signA(map[string]any{"sub": strings.Repeat("s", 256)}),
			wantDesc: []string{"claims rejected", "'sub' claim is 256 bytes long; Sandgate accepts at most 255"},
		},
		{
			name:     "GroupWithEscape",
			token:    signA(map[string]any{"groups": []string{"dev", "\x1b[2Jops"}}),
			wantDesc: []string{"claims rejected", "control character U+001B"},
		},
		{
			name:     "MissingExp",
			token:    signA(map[string]any{"exp": nil}),
			wantDesc: []string{"token has no 'exp' claim; tokens must expire"},
		},
		{
			name:     "MissingIss",
			token:    signA(map[string]any{"iss": nil}),
			wantDesc: []string{"token has no 'iss' claim"},
		},
		{
			name:     "NotAJWT",
			token:    func(*testing.T, *jwksServer) string { return "opaque-access-token" },
			wantDesc: []string{"malformed token", "three dot-separated parts"},
		},
		{
			name:     "JWE",
			token:    func(*testing.T, *jwksServer) string { return "a.b.c.d.e" },
			wantDesc: []string{"JWE is not accepted"},
		},
		{
			name:     "PayloadNotBase64",
			token:    func(*testing.T, *jwksServer) string { return "eyJhbGciOiJSUzI1NiJ9.!!!.sig" },
			wantDesc: []string{"malformed token payload"},
		},
		{
			name: "PayloadNotJSON",
			token: func(*testing.T, *jwksServer) string {
				return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte("[1,2]")) + ".sig"
			},
			wantDesc: []string{"malformed token payload"},
		},
		{
			name:  "ClaimValidationRuleFails",
			token: signA(map[string]any{"email_verified": false}),
			issuer: func(ic *config.Issuer) {
				ic.ClaimValidationRules = []config.ClaimValidationRule{{Expression: "claims.email_verified == true", Message: "your e-mail address must be verified"}}
			},
			wantDesc: []string{"claims rejected: your e-mail address must be verified"},
		},
		{
			name:  "ClaimValidationRuleMissingClaim",
			token: signA(map[string]any{"email_verified": nil}),
			issuer: func(ic *config.Issuer) {
				ic.ClaimValidationRules = []config.ClaimValidationRule{{Expression: "claims.email_verified == true", Message: "your e-mail address must be verified"}}
			},
			wantDesc: []string{"your e-mail address must be verified", "email_verified"},
		},
		{
			name:  "UsernameMappingNotAString",
			token: signA(map[string]any{"preferred_username": 42}),
			issuer: func(ic *config.Issuer) {
				ic.ClaimMappings.Username = config.ClaimOrExpression{Claim: "preferred_username"}
			},
			wantDesc: []string{"username: expected a string, got float64"},
		},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newJWKSServer(t, keyA(), keyEC())
			ic := s.issuerConfig()
			if tt.issuer != nil {
				tt.issuer(&ic)
			}
			a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{ic}})

			p, err := a.Authenticate(context.Background(), tt.token(t, s))
			if len(tt.wantDesc) == 0 {
				require.NoError(t, err)
				require.Equal(t, s.issuer, p.Issuer)
				require.Equal(t, "u-123", p.Subject)
				return
			}
			requireAuthError(t, err, "invalid_token", tt.wantDesc...)
			require.Empty(t, p)
		})
	}
}

func TestAuthenticateMapsPrincipal(t *testing.T) {
	t.Parallel()

	s := newJWKSServer(t, keyA())
	ic := s.issuerConfig()
	ic.ClaimMappings = config.ClaimMappings{
		Username: config.ClaimOrExpression{Claim: "preferred_username"},
		Credentials: config.CredentialMappings{
			KubernetesUser:   config.ClaimOrExpression{Expression: `"oidc:" + claims.preferred_username`},
			KubernetesGroups: config.ClaimOrExpression{Expression: `claims.groups.map(g, "oidc:" + g)`},
		},
	}
	ic.ClaimValidationRules = []config.ClaimValidationRule{{Expression: "claims.email_verified == true", Message: "verify your e-mail first"}}
	ic.GroupRoles = []config.GroupRole{
		{Group: "finance", AWSRoleARN: "arn:aws:iam::111111111111:role/finance"},
		{Group: "ops", AWSRoleARN: "arn:aws:iam::123456789012:role/ops", RunAs: "ops", KubernetesUser: "ignored-because-cel-set-it"},
		{Group: "dev", AWSRoleARN: "arn:aws:iam::123456789012:role/dev", RunAs: "dev"},
	}
	a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{ic}, AdminGroups: []string{"ops"}})

	p, err := a.Authenticate(context.Background(), keyA().sign(t, s.claims(nil)))
	require.NoError(t, err)
	require.Equal(t, principal.Principal{
		Issuer:   s.issuer,
		Subject:  "u-123",
		Username: "alice",
		Email:    "alice@example.test",
		Groups:   []string{"dev", "ops"},
		Credentials: principal.Credentials{
			KubernetesUser:   "oidc:alice",
			KubernetesGroups: []string{"oidc:dev", "oidc:ops"},
			AWSRoleARN:       "arn:aws:iam::123456789012:role/ops", // first matching group_roles row
			RunAs:            "ops",
		},
		Admin: true,
	}, p)
	require.Equal(t, s.issuer+"#u-123", p.Key())
}

func TestAuthenticateKeyRotation(t *testing.T) {
	t.Parallel()

	s := newJWKSServer(t, keyA())
	a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{s.issuerConfig()}})
	ctx := context.Background()
	tokA := keyA().sign(t, s.claims(nil))
	tokB := keyB().sign(t, s.claims(map[string]any{"sub": "u-456"}))

	_, err := a.Authenticate(ctx, tokA)
	require.NoError(t, err)
	require.EqualValues(t, 1, s.discoveryHits.Load())
	require.EqualValues(t, 1, s.jwksHits.Load())

	_, err = a.Authenticate(ctx, tokA)
	require.NoError(t, err)
	require.EqualValues(t, 1, s.jwksHits.Load(), "a known kid is served from the cached key set")

	// The issuer rotates to key B (and drops A): the first B token triggers one refresh.
	s.setKeys(keyB())
	p, err := a.Authenticate(ctx, tokB)
	require.NoError(t, err)
	require.Equal(t, "u-456", p.Subject)
	require.EqualValues(t, 2, s.jwksHits.Load(), "an unknown kid refreshes the JWKS")
	require.EqualValues(t, 1, s.discoveryHits.Load(), "discovery runs once")

	_, err = a.Authenticate(ctx, tokA)
	requireAuthError(t, err, "invalid_token", "failed to verify id token signature")

	// Overlap during rotation: both keys published, both accepted (by a gateway that
	// fetches the set now: this one just spent its burst of refetches, see
	// TestJWKSRefetchIsRateLimited).
	s.setKeys(keyA(), keyB())
	fresh := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{s.issuerConfig()}})
	for _, tok := range []string{tokA, tokB} {
		_, err = fresh.Authenticate(ctx, tok)
		require.NoError(t, err)
	}
}

func TestAuthenticateIssuerUnavailable(t *testing.T) {
	t.Parallel()

	t.Run("DiscoveryDownThenRecovers", func(t *testing.T) {
		t.Parallel()
		s := newJWKSServer(t, keyA())
		s.discoveryStatus.Store(500)
		a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{s.issuerConfig()}})
		tok := keyA().sign(t, s.claims(nil))

		_, err := a.Authenticate(context.Background(), tok)
		require.ErrorIs(t, err, auth.ErrIssuerUnavailable)
		require.Contains(t, err.Error(), s.issuer)
		var ae *auth.Error
		require.NotErrorAs(t, err, &ae, "an unreachable issuer proves nothing about the token")

		// A failed discovery is not retried for every request.
		_, err = a.Authenticate(context.Background(), tok)
		require.ErrorIs(t, err, auth.ErrIssuerUnavailable)
		require.Contains(t, err.Error(), "failed moments ago")
		require.EqualValues(t, 1, s.discoveryHits.Load())

		s.discoveryStatus.Store(0)
		require.Eventually(t, func() bool {
			_, err := a.Authenticate(context.Background(), tok)
			return err == nil
		}, 5*time.Second, 100*time.Millisecond)
	})

	t.Run("JWKSDown", func(t *testing.T) {
		t.Parallel()
		s := newJWKSServer(t, keyA())
		s.jwksStatus.Store(502)
		a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{s.issuerConfig()}})

		_, err := a.Authenticate(context.Background(), keyA().sign(t, s.claims(nil)))
		require.ErrorIs(t, err, auth.ErrIssuerUnavailable)
		require.Contains(t, err.Error(), "fetching keys")
	})

	t.Run("DiscoveryWithoutJWKSURI", func(t *testing.T) {
		t.Parallel()
		s := newJWKSServer(t, keyA())
		s.omitJWKSURI.Store(true)
		a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{s.issuerConfig()}})

		_, err := a.Authenticate(context.Background(), keyA().sign(t, s.claims(nil)))
		require.ErrorIs(t, err, auth.ErrIssuerUnavailable)
		require.Contains(t, err.Error(), "has no jwks_uri")
	})

	t.Run("ServerGone", func(t *testing.T) {
		t.Parallel()
		s := newJWKSServer(t, keyA())
		s.srv.Close()
		a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{s.issuerConfig()}})

		_, err := a.Authenticate(context.Background(), keyA().sign(t, s.claims(nil)))
		require.ErrorIs(t, err, auth.ErrIssuerUnavailable)
	})

	t.Run("DiscoveryNamesAnotherIssuer", func(t *testing.T) {
		t.Parallel()
		s := startJWKSServer(t, false, "https://someone-else.example", keyA())
		ic := config.Issuer{URL: s.base, Audiences: []string{testAudience}}
		a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{ic}})

		_, err := a.Authenticate(context.Background(), keyA().sign(t, stdClaims(s.base, testNow, nil)))
		require.ErrorIs(t, err, auth.ErrIssuerUnavailable)
		require.Contains(t, err.Error(), "names issuer")
	})
}

func TestAuthenticateMultipleIssuers(t *testing.T) {
	t.Parallel()

	s1 := newJWKSServer(t, keyA())
	s2 := newJWKSServer(t, keyB())
	ic2 := s2.issuerConfig()
	ic2.ClaimMappings.Username = config.ClaimOrExpression{Claim: "email"}
	a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{s1.issuerConfig(), ic2}})
	ctx := context.Background()

	p1, err := a.Authenticate(ctx, keyA().sign(t, s1.claims(nil)))
	require.NoError(t, err)
	require.Equal(t, s1.issuer, p1.Issuer)
	require.Equal(t, "u-123", p1.Username)

	p2, err := a.Authenticate(ctx, keyB().sign(t, s2.claims(nil)))
	require.NoError(t, err)
	require.Equal(t, s2.issuer, p2.Issuer)
	require.Equal(t, "alice@example.test", p2.Username, "each issuer has its own mappings")
	require.NotEqual(t, p1.Key(), p2.Key())

	// Issuer 1's key cannot vouch for issuer 2's tokens.
	_, err = a.Authenticate(ctx, keyA().sign(t, s2.claims(nil)))
	requireAuthError(t, err, "invalid_token", "failed to verify id token signature")
}

// TestAuthenticateKubernetesStyleIssuer covers discovery_url, ca_file and bearer_token_file:
// the discovery document is served over TLS by a host other than the issuer it names, and
// fetching it needs a bearer token that rotates on disk.
func TestAuthenticateKubernetesStyleIssuer(t *testing.T) {
	t.Parallel()

	const k8sIssuer = "https://kubernetes.default.svc.cluster.local"
	s := startJWKSServer(t, true, k8sIssuer, keyA())
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw}), 0o600))
	tokenFile := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("sa-token-1\n"), 0o600))

	ic := config.Issuer{
		URL:             k8sIssuer,
		DiscoveryURL:    s.base + "/.well-known/openid-configuration",
		Audiences:       []string{testAudience},
		CAFile:          caFile,
		BearerTokenFile: tokenFile,
	}
	a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{ic}})
	claims := stdClaims(k8sIssuer, testNow, map[string]any{"sub": "system:serviceaccount:agents:runner"})

	p, err := a.Authenticate(context.Background(), keyA().sign(t, claims))
	require.NoError(t, err)
	require.Equal(t, k8sIssuer, p.Issuer)
	require.Equal(t, "system:serviceaccount:agents:runner", p.Username)
	require.Equal(t, "Bearer sa-token-1", s.lastAuthz.Load())

	// The projected token rotates; the next key fetch (unknown kid) sends the new one.
	require.NoError(t, os.WriteFile(tokenFile, []byte("sa-token-2"), 0o600))
	s.setKeys(keyA(), keyB())
	_, err = a.Authenticate(context.Background(), keyB().sign(t, claims))
	require.NoError(t, err)
	require.Equal(t, "Bearer sa-token-2", s.lastAuthz.Load())

	t.Run("DiscoveryURLIsTheExactDocument", func(t *testing.T) {
		t.Parallel()
		ic := ic
		ic.DiscoveryURL = s.base + "/" // not a discovery document: refused, never guessed
		a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{ic}})
		_, err := a.Authenticate(context.Background(), keyA().sign(t, claims))
		require.ErrorIs(t, err, auth.ErrIssuerUnavailable)
	})

	t.Run("BearerTokenFileMissing", func(t *testing.T) {
		t.Parallel()
		ic := ic
		ic.BearerTokenFile = filepath.Join(dir, "no-such-token")
		a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{ic}})
		_, err := a.Authenticate(context.Background(), keyA().sign(t, claims))
		require.ErrorIs(t, err, auth.ErrIssuerUnavailable)
		require.Contains(t, err.Error(), "read bearer_token_file")
	})

	t.Run("WithoutCAFile", func(t *testing.T) {
		t.Parallel()
		ic := ic
		ic.CAFile = ""
		a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{ic}})
		_, err := a.Authenticate(context.Background(), keyA().sign(t, claims))
		require.ErrorIs(t, err, auth.ErrIssuerUnavailable)
		require.Contains(t, err.Error(), "certificate")
	})
}

func TestNewConfigurationErrors(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))

	tests := []struct {
		name    string
		cfg     config.Auth
		wantErr []string
	}{
		{name: "NoIssuer", cfg: config.Auth{}, wantErr: []string{"no issuer configured", "auth.issuers"}},
		{
			name:    "MissingCAFile",
			cfg:     config.Auth{Issuers: []config.Issuer{{URL: "https://idp.example", Audiences: []string{"a"}, CAFile: filepath.Join(dir, "missing.pem")}}},
			wantErr: []string{"auth.issuers[https://idp.example].ca_file", "missing.pem"},
		},
		{
			name:    "CAFileWithoutPEM",
			cfg:     config.Auth{Issuers: []config.Issuer{{URL: "https://idp.example", Audiences: []string{"a"}, CAFile: notPEM}}},
			wantErr: []string{"auth.issuers[https://idp.example].ca_file", "no PEM certificate"},
		},
		{
			name: "BadCEL",
			cfg: config.Auth{Issuers: []config.Issuer{{URL: "https://idp.example", Audiences: []string{"a"},
				ClaimMappings: config.ClaimMappings{Credentials: config.CredentialMappings{AWSRoleARN: config.ClaimOrExpression{Expression: "claims.("}}}}}},
			wantErr: []string{"auth.issuers[https://idp.example].claim_mappings.credentials.aws_role_arn.expression"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, err := auth.New(context.Background(), tt.cfg)
			require.Error(t, err)
			require.Nil(t, a)
			for _, w := range tt.wantErr {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestAuthenticateConcurrentFirstUse(t *testing.T) {
	t.Parallel()

	s := newJWKSServer(t, keyA())
	a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{s.issuerConfig()}})
	tok := keyA().sign(t, s.claims(nil))

	errs := make(chan error, 16)
	for range cap(errs) {
		go func() {
			_, err := a.Authenticate(context.Background(), tok)
			errs <- err
		}()
	}
	for range cap(errs) {
		require.NoError(t, <-errs)
	}
	require.EqualValues(t, 1, s.discoveryHits.Load(), "concurrent first requests share one discovery")
}

// Junk tokens cannot hammer the identity provider: tokens with unknown key ids (each makes
// go-oidc refetch the JWKS) cause a few fetches, then at most one per 10 s; valid tokens keep
// verifying meanwhile.
func TestJWKSRefetchIsRateLimited(t *testing.T) {
	t.Parallel()
	s := newJWKSServer(t, keyA())
	a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{s.issuerConfig()}})
	ctx := context.Background()
	good := keyA().sign(t, s.claims(nil))
	_, err := a.Authenticate(ctx, good)
	require.NoError(t, err)
	for i := range 50 {
		junk := testKey{kid: fmt.Sprintf("junk-%d", i), alg: jose.RS256, key: rsaKeyB()}.sign(t, s.claims(nil))
		_, err := a.Authenticate(ctx, junk)
		require.Error(t, err)
	}
	assert.LessOrEqual(t, s.jwksHits.Load(), int32(3), "the first fetch and a small burst, then none within 10 s")
	_, err = a.Authenticate(ctx, good)
	require.NoError(t, err, "valid tokens still verify from the last key set")
}

// TestVerifiedTokensAreRemembered: a token that verified is not verified again on its next
// use, but is refused once it expires, and verified again once its issuer's keys change.
func TestVerifiedTokensAreRemembered(t *testing.T) {
	t.Parallel()
	s := newJWKSServer(t, keyA())
	var mu sync.Mutex
	now := testNow
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{s.issuerConfig()}, ClockSkew: config.Duration(time.Second)}, auth.WithClock(clock))
	ctx := context.Background()
	tok := keyA().sign(t, s.claims(map[string]any{"exp": testNow.Add(90 * time.Second).Unix()}))

	p, err := a.Authenticate(ctx, tok)
	require.NoError(t, err)
	p.Groups[0] = "changed by the caller"
	again, err := a.Authenticate(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, []string{"dev", "ops"}, again.Groups, "callers get copies")

	// Past the remembering interval the signature is checked again (the keys still hold).
	advance(61 * time.Second)
	_, err = a.Authenticate(ctx, tok)
	require.NoError(t, err)

	// Expiry is checked on every use, remembered or not.
	advance(31 * time.Second)
	_, err = a.Authenticate(ctx, tok)
	requireAuthError(t, err, "invalid_token", "expired")
}

// BenchmarkAuthenticate compares the first use of a token (signature and claim mappings)
// with later uses of it (remembered): run with -bench Authenticate and compare the two.
func BenchmarkAuthenticate(b *testing.B) {
	s := newJWKSServer(b, keyEC())
	cfg := config.Auth{Issuers: []config.Issuer{s.issuerConfig()}, ClockSkew: config.Duration(30 * time.Second)}
	ctx := context.Background()
	newA := func() *auth.Authenticator {
		a, err := auth.New(b.Context(), cfg, auth.WithClock(func() time.Time { return testNow }), auth.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			b.Fatal(err)
		}
		return a
	}
	b.Run("first-use", func(b *testing.B) {
		a := newA()
		toks := make([]string, b.N)
		for i := range toks {
			toks[i] = keyEC().sign(b, s.claims(map[string]any{"jti": fmt.Sprint(i)}))
		}
		b.ResetTimer()
		for i := range b.N {
			if _, err := a.Authenticate(ctx, toks[i]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("remembered", func(b *testing.B) {
		a := newA()
		tok := keyEC().sign(b, s.claims(nil))
		if _, err := a.Authenticate(ctx, tok); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for range b.N {
			if _, err := a.Authenticate(ctx, tok); err != nil {
				b.Fatal(err)
			}
		}
	})
}
