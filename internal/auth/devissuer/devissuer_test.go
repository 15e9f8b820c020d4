package devissuer_test

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/oauth2"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/auth/devissuer"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/principal"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	prefix      = "/dev/oidc"
	redirectURI = "http://localhost:8765/callback"
)

// devServer is a dev issuer mounted under prefix on an httptest server, as `gateway dev`
// mounts it: the issuer URL is the server URL plus the prefix.
type devServer struct {
	iss    *devissuer.Issuer
	srv    *httptest.Server
	client *http.Client // does not follow redirects
}

func startDevServer(t *testing.T, setup ...func(*devissuer.Issuer)) *devServer {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewUnstartedServer(mux)
	iss, err := devissuer.Open("http://"+srv.Listener.Addr().String()+prefix+"/", filepath.Join(t.TempDir(), "keys", "dev-issuer.pem"))
	require.NoError(t, err)
	for _, f := range setup {
		f(iss)
	}
	mux.Handle(prefix+"/", http.StripPrefix(prefix, iss.Handler()))
	srv.Start()
	t.Cleanup(srv.Close)
	require.Equal(t, srv.URL+prefix, iss.URL(), "the trailing slash is trimmed")

	client := srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &devServer{iss: iss, srv: srv, client: client}
}

// authenticator trusts the dev issuer exactly as `gateway dev` configures it.
func (d *devServer) authenticator(t *testing.T, opts ...auth.Option) *auth.Authenticator {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	opts = append([]auth.Option{auth.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	a, err := auth.New(ctx, config.Auth{
		Issuers:     []config.Issuer{{URL: d.iss.URL(), Audiences: []string{devissuer.Audience}}},
		AdminGroups: []string{"admins"},
		ClockSkew:   config.Duration(30 * time.Second),
	}, opts...)
	require.NoError(t, err)
	return a
}

func (d *devServer) getJSON(t *testing.T, path string, v any) *http.Response {
	t.Helper()
	resp, err := d.client.Get(d.iss.URL() + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
	return resp
}

func TestDiscovery(t *testing.T) {
	t.Parallel()
	d := startDevServer(t)
	u := d.iss.URL()

	var doc map[string]any
	resp := d.getJSON(t, "/.well-known/openid-configuration", &doc)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))

	for k, want := range map[string]any{
		"issuer":                                u,
		"jwks_uri":                              u + "/jwks",
		"authorization_endpoint":                u + "/authorize",
		"token_endpoint":                        u + "/token",
		"response_types_supported":              []any{"code"},
		"grant_types_supported":                 []any{"authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code"},
		"device_authorization_endpoint":         u + "/device_authorization",
		"id_token_signing_alg_values_supported": []any{"ES256"},
		"code_challenge_methods_supported":      []any{"S256"},
		"token_endpoint_auth_methods_supported": []any{"none"},
		"subject_types_supported":               []any{"public"},
	} {
		require.Equal(t, want, doc[k], k)
	}
	require.Subset(t, doc["scopes_supported"], []any{"openid", "groups"})

	var set jose.JSONWebKeySet
	d.getJSON(t, "/jwks", &set)
	require.Len(t, set.Keys, 1)
	k := set.Keys[0]
	require.Equal(t, "ES256", k.Algorithm)
	require.Equal(t, "sig", k.Use)
	require.Len(t, k.KeyID, 16)
	require.True(t, k.Valid() && k.IsPublic(), "only the public key is published")
}

func TestMintVerifiedByAuthenticate(t *testing.T) {
	t.Parallel()
	d := startDevServer(t)
	a := d.authenticator(t)

	tok, err := d.iss.Mint(devissuer.Claims{Subject: "alice", Groups: []string{"dev", "admins"}, Email: "alice@example.test"})
	require.NoError(t, err)
	p, err := a.Authenticate(context.Background(), tok)
	require.NoError(t, err)
	require.Equal(t, principal.Principal{
		Issuer: d.iss.URL(), Subject: "alice", Username: "alice", Email: "alice@example.test",
		Groups: []string{"dev", "admins"}, Credentials: principal.Credentials{KubernetesGroups: []string{}}, Admin: true,
	}, p)

	// The claims a dev token carries.
	jws, err := jose.ParseSignedCompact(tok, []jose.SignatureAlgorithm{jose.ES256})
	require.NoError(t, err)
	var set jose.JSONWebKeySet
	d.getJSON(t, "/jwks", &set)
	require.Equal(t, set.Keys[0].KeyID, jws.Signatures[0].Header.KeyID)
	require.Equal(t, "JWT", jws.Signatures[0].Header.ExtraHeaders[jose.HeaderType])
	var c map[string]any
	require.NoError(t, json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &c))
	require.Equal(t, d.iss.URL(), c["iss"])
	require.Equal(t, devissuer.Audience, c["aud"])
	require.Equal(t, devissuer.ClientID, c["azp"])
	require.Equal(t, "alice", c["preferred_username"])
	require.Equal(t, true, c["email_verified"])
	require.Equal(t, c["iat"], c["nbf"])
	require.InDelta(t, (12 * time.Hour).Seconds(), c["exp"].(float64)-c["iat"].(float64), 0, "default TTL is 12h")

	t.Run("MinimalClaims", func(t *testing.T) {
		t.Parallel()
		tok, err := d.iss.Mint(devissuer.Claims{Subject: "bob", TTL: time.Minute})
		require.NoError(t, err)
		p, err := a.Authenticate(context.Background(), tok)
		require.NoError(t, err)
		require.Equal(t, "bob", p.Username)
		require.Empty(t, p.Email)
		require.Equal(t, []string{}, p.Groups)
		require.False(t, p.Admin)

		jws, err := jose.ParseSignedCompact(tok, []jose.SignatureAlgorithm{jose.ES256})
		require.NoError(t, err)
		var c map[string]any
		require.NoError(t, json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &c))
		require.Equal(t, []any{}, c["groups"], "groups is an empty array, never null")
		require.NotContains(t, c, "email")
		require.NotContains(t, c, "email_verified")
		require.InDelta(t, 60, c["exp"].(float64)-c["iat"].(float64), 0)
	})

	t.Run("SubjectRequired", func(t *testing.T) {
		t.Parallel()
		_, err := d.iss.Mint(devissuer.Claims{Groups: []string{"dev"}})
		require.ErrorContains(t, err, "subject is required")
	})

	t.Run("ExpiresAfterTTL", func(t *testing.T) {
		t.Parallel()
		tok, err := d.iss.Mint(devissuer.Claims{Subject: "carol", TTL: time.Hour})
		require.NoError(t, err)
		later := d.authenticator(t, auth.WithClock(func() time.Time { return time.Now().Add(2 * time.Hour) }))
		_, err = later.Authenticate(context.Background(), tok)
		var ae *auth.Error
		require.ErrorAs(t, err, &ae)
		require.Equal(t, "invalid_token", ae.Code)
		require.Contains(t, ae.Description, "token expired at")
	})

	t.Run("AnotherDevIssuerIsNotTrusted", func(t *testing.T) {
		t.Parallel()
		other := startDevServer(t)
		tok, err := other.iss.Mint(devissuer.Claims{Subject: "mallory"})
		require.NoError(t, err)
		_, err = a.Authenticate(context.Background(), tok)
		var ae *auth.Error
		require.ErrorAs(t, err, &ae)
		require.Contains(t, ae.Description, "is not trusted")
	})
}

func TestOpenKeyFile(t *testing.T) {
	t.Parallel()

	t.Run("CreatedPrivateAndReused", func(t *testing.T) {
		t.Parallel()
		keyFile := filepath.Join(t.TempDir(), "a", "b", "dev.pem")
		first, err := devissuer.Open("http://localhost:8080/dev/oidc", keyFile)
		require.NoError(t, err)
		fi, err := os.Stat(keyFile)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

		second, err := devissuer.Open("http://localhost:8080/dev/oidc", keyFile)
		require.NoError(t, err)
		require.Equal(t, jwks(t, first), jwks(t, second), "the key survives a restart")

		tok, err := first.Mint(devissuer.Claims{Subject: "alice"})
		require.NoError(t, err)
		jws, err := jose.ParseSignedCompact(tok, []jose.SignatureAlgorithm{jose.ES256})
		require.NoError(t, err)
		_, err = jws.Verify(jwks(t, second).Keys[0])
		require.NoError(t, err, "a token minted before the restart verifies after it")
	})

	t.Run("NotPEM", func(t *testing.T) {
		t.Parallel()
		keyFile := filepath.Join(t.TempDir(), "dev.pem")
		require.NoError(t, os.WriteFile(keyFile, []byte("garbage"), 0o600))
		_, err := devissuer.Open("http://localhost:8080/dev/oidc", keyFile)
		require.ErrorContains(t, err, "holds no PEM key; delete it to create a new one")
	})
}

// jwks reads an issuer's key set through its handler.
func jwks(t *testing.T, iss *devissuer.Issuer) jose.JSONWebKeySet {
	t.Helper()
	rec := httptest.NewRecorder()
	iss.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/jwks", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	var set jose.JSONWebKeySet
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &set))
	return set
}

// authorizeQuery is a valid authorization request; overrides replace parameters and an empty
// override removes one.
func authorizeQuery(challenge string, overrides map[string]string) url.Values {
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {devissuer.ClientID},
		"redirect_uri":          {redirectURI},
		"state":                 {"st-123"},
		"code_challenge":        {challenge},
		"code_challenge_method": {"S256"},
		"scope":                 {"openid groups"},
	}
	for k, v := range overrides {
		if v == "" {
			q.Del(k)
			continue
		}
		q.Set(k, v)
	}
	return q
}

var hiddenQ = regexp.MustCompile(`name="q" value="([^"]*)"`)

// signIn runs GET /authorize (the form) and POST /authorize (the sign-in) and returns the
// redirect.
func (d *devServer) signIn(t *testing.T, q url.Values, form url.Values) *url.URL {
	t.Helper()
	resp, err := d.client.Get(d.iss.URL() + "/authorize?" + q.Encode())
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	m := hiddenQ.FindSubmatch(body)
	require.NotNil(t, m, "the form carries the authorization request: %s", body)

	form.Set("q", html.UnescapeString(string(m[1])))
	resp, err = d.client.PostForm(d.iss.URL()+"/authorize", form)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusFound, resp.StatusCode)
	loc, err := resp.Location()
	require.NoError(t, err)
	return loc
}

// exchange posts a token request and returns the status and decoded JSON body.
func (d *devServer) exchange(t *testing.T, form url.Values) (int, map[string]any) {
	t.Helper()
	resp, err := d.client.PostForm(d.iss.URL()+"/token", form)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return resp.StatusCode, body
}

func tokenForm(code, verifier string, overrides map[string]string) url.Values {
	f := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"client_id":     {devissuer.ClientID},
		"redirect_uri":  {redirectURI},
		"code_verifier": {verifier},
	}
	for k, v := range overrides {
		f.Set(k, v)
	}
	return f
}

func TestAuthorizationCodePKCE(t *testing.T) {
	t.Parallel()
	d := startDevServer(t)
	a := d.authenticator(t)
	verifier := oauth2.GenerateVerifier()

	loc := d.signIn(t, authorizeQuery(oauth2.S256ChallengeFromVerifier(verifier), nil),
		url.Values{"sub": {"alice"}, "groups": {" dev, admins ,, "}, "email": {"alice@example.test"}})
	require.Equal(t, "localhost:8765", loc.Host)
	require.Equal(t, "/callback", loc.Path)
	require.Equal(t, "st-123", loc.Query().Get("state"))
	code := loc.Query().Get("code")
	require.NotEmpty(t, code)

	status, body := d.exchange(t, tokenForm(code, verifier, nil))
	require.Equal(t, http.StatusOK, status, body)
	require.Equal(t, "Bearer", body["token_type"])
	require.EqualValues(t, 12*60*60, body["expires_in"])
	tok, _ := body["access_token"].(string)
	require.NotEmpty(t, tok)
	require.Equal(t, tok, body["id_token"])

	p, err := a.Authenticate(context.Background(), tok)
	require.NoError(t, err)
	require.Equal(t, "alice", p.Subject)
	require.Equal(t, []string{"dev", "admins"}, p.Groups)
	require.Equal(t, "alice@example.test", p.Email)
	require.True(t, p.Admin)

	// A code is single use: replaying it, even with the right verifier, fails.
	status, body = d.exchange(t, tokenForm(code, verifier, nil))
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "invalid_grant", body["error"])
	require.Contains(t, body["error_description"], "unknown, used or expired code")
}

func TestAuthorizationCodeWithOAuth2Client(t *testing.T) {
	t.Parallel()
	d := startDevServer(t)
	a := d.authenticator(t)

	// The public client as golang.org/x/oauth2 drives it (client_id in the body: the
	// issuer's only token endpoint auth method is "none").
	conf := oauth2.Config{
		ClientID:    devissuer.ClientID,
		RedirectURL: redirectURI,
		Scopes:      []string{"openid", "groups"},
		Endpoint: oauth2.Endpoint{
			AuthURL: d.iss.URL() + "/authorize", TokenURL: d.iss.URL() + "/token", AuthStyle: oauth2.AuthStyleInParams,
		},
	}
	verifier := oauth2.GenerateVerifier()
	authURL, err := url.Parse(conf.AuthCodeURL("xyz", oauth2.S256ChallengeOption(verifier)))
	require.NoError(t, err)
	loc := d.signIn(t, authURL.Query(), url.Values{"sub": {"dave"}, "groups": {"dev"}})
	require.Equal(t, "xyz", loc.Query().Get("state"))

	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, d.client)
	tok, err := conf.Exchange(ctx, loc.Query().Get("code"), oauth2.VerifierOption(verifier))
	require.NoError(t, err)
	p, err := a.Authenticate(context.Background(), tok.AccessToken)
	require.NoError(t, err)
	require.Equal(t, "dave", p.Username)
	require.Equal(t, []string{"dev"}, p.Groups)
}

func TestTokenErrors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		// form returns the token request for a freshly issued code and its verifier.
		form     func(code, verifier string) url.Values
		wantErr  string
		wantDesc string
	}{
		{
			name:     "WrongVerifier",
			form:     func(code, _ string) url.Values { return tokenForm(code, oauth2.GenerateVerifier(), nil) },
			wantErr:  "invalid_grant",
			wantDesc: "code_verifier does not match code_challenge",
		},
		{
			name:     "MissingVerifier",
			form:     func(code, _ string) url.Values { return tokenForm(code, "", nil) },
			wantErr:  "invalid_grant",
			wantDesc: "code_verifier does not match code_challenge",
		},
		{
			name:     "ChallengeInsteadOfVerifier",
			form:     func(code, v string) url.Values { return tokenForm(code, oauth2.S256ChallengeFromVerifier(v), nil) },
			wantErr:  "invalid_grant",
			wantDesc: "code_verifier does not match code_challenge",
		},
		{
			name: "OtherRedirectURI",
			form: func(code, v string) url.Values {
				return tokenForm(code, v, map[string]string{"redirect_uri": "http://localhost:8765/other"})
			},
			wantErr:  "invalid_grant",
			wantDesc: "redirect_uri does not match",
		},
		{
			name:     "OtherClientID",
			form:     func(code, v string) url.Values { return tokenForm(code, v, map[string]string{"client_id": "someone"}) },
			wantErr:  "invalid_grant",
			wantDesc: "client_id or redirect_uri does not match",
		},
		{
			name:     "UnknownCode",
			form:     func(_, v string) url.Values { return tokenForm("not-a-code", v, nil) },
			wantErr:  "invalid_grant",
			wantDesc: "unknown, used or expired code",
		},
		{
			name: "UnsupportedGrant",
			form: func(code, v string) url.Values {
				return tokenForm(code, v, map[string]string{"grant_type": "client_credentials"})
			},
			wantErr:  "unsupported_grant_type",
			wantDesc: "supported grants: authorization_code, refresh_token, urn:ietf:params:oauth:grant-type:device_code",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := startDevServer(t)
			verifier := oauth2.GenerateVerifier()
			loc := d.signIn(t, authorizeQuery(oauth2.S256ChallengeFromVerifier(verifier), nil), url.Values{"sub": {"alice"}})
			code := loc.Query().Get("code")

			status, body := d.exchange(t, tt.form(code, verifier))
			require.Equal(t, http.StatusBadRequest, status)
			require.Equal(t, tt.wantErr, body["error"])
			require.Contains(t, body["error_description"], tt.wantDesc)
			require.NotContains(t, body, "access_token")

			if tt.wantErr == "invalid_grant" && tt.name != "UnknownCode" {
				// A failed redemption burns the code: no second guess at the verifier.
				status, body = d.exchange(t, tokenForm(code, verifier, nil))
				require.Equal(t, http.StatusBadRequest, status)
				require.Equal(t, "invalid_grant", body["error"])
			}
		})
	}
}

func TestAuthorizationCodeExpires(t *testing.T) {
	t.Parallel()
	var now atomicTime
	now.set(time.Now())
	d := startDevServer(t, func(i *devissuer.Issuer) { devissuer.SetClock(i, now.get) })
	verifier := oauth2.GenerateVerifier()
	loc := d.signIn(t, authorizeQuery(oauth2.S256ChallengeFromVerifier(verifier), nil), url.Values{"sub": {"alice"}})

	now.set(now.get().Add(2 * time.Minute)) // codes live one minute
	status, body := d.exchange(t, tokenForm(loc.Query().Get("code"), verifier, nil))
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "invalid_grant", body["error"])
	require.Contains(t, body["error_description"], "expired")
}

func TestAuthorizeRequestErrors(t *testing.T) {
	t.Parallel()
	d := startDevServer(t)
	challenge := oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier())

	tests := []struct {
		name      string
		overrides map[string]string
		wantMsg   string // "" = accepted (200 form)
	}{
		{name: "Valid"},
		{name: "Loopback127", overrides: map[string]string{"redirect_uri": "http://127.0.0.1:9999/cb"}},
		{name: "LoopbackIPv6", overrides: map[string]string{"redirect_uri": "http://[::1]:9999/cb"}},
		{name: "NoState", overrides: map[string]string{"state": ""}},
		{name: "RedirectNotLocalhost", overrides: map[string]string{"redirect_uri": "https://evil.example/cb"}, wantMsg: "redirect_uri must point to localhost"},
		{name: "RedirectLocalhostLookalike", overrides: map[string]string{"redirect_uri": "http://localhost.evil.example/cb"}, wantMsg: "redirect_uri must point to localhost"},
		{name: "RedirectUserinfoTrick", overrides: map[string]string{"redirect_uri": "http://localhost@evil.example/cb"}, wantMsg: "redirect_uri must point to localhost"},
		{name: "RedirectRelative", overrides: map[string]string{"redirect_uri": "/callback"}, wantMsg: "redirect_uri must be an absolute http(s) URL"},
		{name: "RedirectCustomScheme", overrides: map[string]string{"redirect_uri": "myapp://localhost/cb"}, wantMsg: "redirect_uri must be an absolute http(s) URL"},
		{name: "RedirectMissing", overrides: map[string]string{"redirect_uri": ""}, wantMsg: "redirect_uri must be an absolute http(s) URL"},
		{name: "MissingPKCE", overrides: map[string]string{"code_challenge": "", "code_challenge_method": ""}, wantMsg: "PKCE is required"},
		{name: "MissingChallengeMethod", overrides: map[string]string{"code_challenge_method": ""}, wantMsg: "PKCE is required"},
		{name: "PlainPKCE", overrides: map[string]string{"code_challenge_method": "plain"}, wantMsg: "code_challenge_method=S256"},
		{name: "ImplicitFlow", overrides: map[string]string{"response_type": "token"}, wantMsg: "response_type must be 'code'"},
		{name: "UnknownClient", overrides: map[string]string{"client_id": "other"}, wantMsg: `unknown client_id; the dev issuer knows "sandgate-console"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := authorizeQuery(challenge, tt.overrides).Encode()

			resp, err := d.client.Get(d.iss.URL() + "/authorize?" + q)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			if tt.wantMsg == "" {
				require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
				require.Contains(t, string(body), "<form")
				return
			}
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			require.Contains(t, string(body), tt.wantMsg)

			// The sign-in POST re-validates the request it carries: a forged form is refused too.
			resp, err = d.client.PostForm(d.iss.URL()+"/authorize", url.Values{"q": {q}, "sub": {"alice"}})
			require.NoError(t, err)
			body, err = io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			require.Contains(t, string(body), tt.wantMsg)
			require.Empty(t, resp.Header.Get("Location"))
		})
	}
}

func TestAuthorizeSignInErrors(t *testing.T) {
	t.Parallel()
	d := startDevServer(t)
	q := authorizeQuery(oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier()), nil).Encode()

	tests := []struct {
		name    string
		form    url.Values
		wantMsg string
	}{
		{name: "MissingSubject", form: url.Values{"q": {q}, "sub": {"   "}}, wantMsg: "subject is required"},
		{name: "MissingRequest", form: url.Values{"sub": {"alice"}}, wantMsg: "response_type must be 'code'"},
		{name: "MalformedRequest", form: url.Values{"q": {"%zz"}, "sub": {"alice"}}, wantMsg: "invalid URL escape"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, err := d.client.PostForm(d.iss.URL()+"/authorize", tt.form)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, http.StatusBadRequest, resp.StatusCode)
			require.Contains(t, string(body), tt.wantMsg)
		})
	}
}

func TestAuthorizeFormEscapesRequest(t *testing.T) {
	t.Parallel()
	d := startDevServer(t)
	q := authorizeQuery(oauth2.S256ChallengeFromVerifier(oauth2.GenerateVerifier()), map[string]string{"state": `"><script>alert(1)</script>`})

	resp, err := d.client.Get(d.iss.URL() + "/authorize?" + q.Encode())
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotContains(t, string(body), "<script>")

	// And the state still round-trips intact.
	loc := d.signIn(t, q, url.Values{"sub": {"alice"}})
	require.Equal(t, `"><script>alert(1)</script>`, loc.Query().Get("state"))
}

func TestEndpointsMethods(t *testing.T) {
	t.Parallel()
	d := startDevServer(t)

	for _, tc := range []struct{ method, path string }{
		{http.MethodPost, "/.well-known/openid-configuration"},
		{http.MethodPost, "/jwks"},
		{http.MethodGet, "/token"},
		{http.MethodDelete, "/authorize"},
	} {
		req, err := http.NewRequest(tc.method, d.iss.URL()+tc.path, strings.NewReader(""))
		require.NoError(t, err)
		resp, err := d.client.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "%s %s", tc.method, tc.path)
	}
}

func TestPKCERFC7636Vector(t *testing.T) {
	t.Parallel()
	d := startDevServer(t)

	// RFC 7636 appendix B: the issuer's S256 check agrees with the specification's example.
	const (
		verifier  = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
		challenge = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
	)
	loc := d.signIn(t, authorizeQuery(challenge, nil), url.Values{"sub": {"alice"}})
	status, body := d.exchange(t, tokenForm(loc.Query().Get("code"), verifier, nil))
	require.Equal(t, http.StatusOK, status, body)
	require.NotEmpty(t, body["access_token"])
}

// atomicTime is a settable clock safe to read from the server's goroutines.
type atomicTime struct{ ns atomic.Int64 }

func (a *atomicTime) set(t time.Time) { a.ns.Store(t.UnixNano()) }
func (a *atomicTime) get() time.Time  { return time.Unix(0, a.ns.Load()) }

// RefuseGroups: the sign-in form does not grant the gateway's admin groups (gateway dev
// without --allow-admin); other groups still sign in, and Mint is unaffected.
func TestSignInRefusesAdminGroups(t *testing.T) {
	d := startDevServer(t, func(i *devissuer.Issuer) { i.RefuseGroups([]string{"admins"}) })
	verifier := oauth2.GenerateVerifier()
	q := authorizeQuery(oauth2.S256ChallengeFromVerifier(verifier), nil)

	resp, err := d.client.Get(d.iss.URL() + "/authorize?" + q.Encode())
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	m := hiddenQ.FindSubmatch(body)
	require.NotNil(t, m)
	resp, err = d.client.PostForm(d.iss.URL()+"/authorize", url.Values{"q": {html.UnescapeString(string(m[1]))}, "sub": {"mallory"}, "groups": {"dev, admins"}})
	require.NoError(t, err)
	body, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, string(body), "--allow-admin")

	loc := d.signIn(t, q, url.Values{"sub": {"alice"}, "groups": {"dev,ml"}})
	require.NotEmpty(t, loc.Query().Get("code"))
	_, err = d.iss.Mint(devissuer.Claims{Subject: "ops", Groups: []string{"admins"}})
	require.NoError(t, err)
}
