package auth_test

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"
	"github.com/stretchr/testify/require"
	"github.com/zitadel/oidc/v3/example/server/storage"
	zoidc "github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/principal"
)

// The zitadel OP tests run a real OpenID provider (github.com/zitadel/oidc/v3/pkg/op) over
// zitadel's example in-memory storage. That storage's only client-credentials client ("sid1")
// gets opaque access tokens, so zitadelStorage adds one service client whose access tokens are
// JWTs for audience "sandgate" carrying groups and e-mail, the shape a production IdP's
// machine-to-machine token has.
const (
	zitadelClientID     = "sandgate-ci"
	zitadelClientSecret = "ci-secret"
	// exampleServiceID/Secret are the example storage's built-in client-credentials client.
	exampleServiceID     = "sid1"
	exampleServiceSecret = "verysecret"
)

type zitadelStorage struct {
	*storage.Storage
	client op.Client
}

// jwtServiceClient is an example web client turned into a client-credentials client with JWT
// access tokens.
type jwtServiceClient struct{ op.Client }

func (jwtServiceClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }

func (jwtServiceClient) GrantTypes() []zoidc.GrantType {
	return []zoidc.GrantType{zoidc.GrantTypeClientCredentials}
}

func (s *zitadelStorage) ClientCredentials(ctx context.Context, clientID, clientSecret string) (op.Client, error) {
	if clientID != zitadelClientID {
		return s.Storage.ClientCredentials(ctx, clientID, clientSecret)
	}
	if subtle.ConstantTimeCompare([]byte(clientSecret), []byte(zitadelClientSecret)) != 1 {
		return nil, errors.New("wrong client secret")
	}
	return s.client, nil
}

func (s *zitadelStorage) ClientCredentialsTokenRequest(ctx context.Context, clientID string, scopes []string) (op.TokenRequest, error) {
	if clientID != zitadelClientID {
		return s.Storage.ClientCredentialsTokenRequest(ctx, clientID, scopes)
	}
	return &zoidc.JWTTokenRequest{Subject: clientID, Audience: []string{testAudience}, Scopes: scopes}, nil
}

func (s *zitadelStorage) GetPrivateClaimsFromScopes(ctx context.Context, userID, clientID string, scopes []string) (map[string]any, error) {
	claims, err := s.Storage.GetPrivateClaimsFromScopes(ctx, userID, clientID, scopes)
	if err != nil || clientID != zitadelClientID {
		return claims, err
	}
	if claims == nil {
		claims = map[string]any{}
	}
	claims["email"] = "ci@example.test"
	claims["email_verified"] = true
	if slices.Contains(scopes, "groups") {
		claims["groups"] = []string{"ci", "deployers"}
	}
	return claims, nil
}

// zitadelOP is a running zitadel OpenID provider.
type zitadelOP struct {
	issuer string
	http   *http.Client
}

func startZitadelOP(t *testing.T) *zitadelOP {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	issuer := "http://" + srv.Listener.Addr().String()
	st := &zitadelStorage{
		Storage: storage.NewStorageWithClients(storage.NewUserStore(issuer), map[string]*storage.Client{}),
		client:  jwtServiceClient{storage.WebClient(zitadelClientID, zitadelClientSecret)},
	}
	provider, err := op.NewProvider(&op.Config{CryptoKey: sha256.Sum256([]byte("sandgate test")), CodeMethodS256: true},
		st, op.StaticIssuer(issuer), op.WithAllowInsecure())
	require.NoError(t, err)
	srv.Config.Handler = provider
	srv.Start()
	t.Cleanup(srv.Close)

	hc := &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	return &zitadelOP{issuer: issuer, http: hc}
}

func (o *zitadelOP) getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := o.http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}

// clientCredentialsToken runs the client-credentials grant against the OP's token endpoint,
// found through discovery.
func (o *zitadelOP) clientCredentialsToken(t *testing.T, clientID, secret string, scopes ...string) (*oauth2.Token, error) {
	t.Helper()
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, o.http)
	prov, err := gooidc.NewProvider(gooidc.ClientContext(ctx, o.http), o.issuer)
	require.NoError(t, err)
	cc := clientcredentials.Config{
		ClientID: clientID, ClientSecret: secret, TokenURL: prov.Endpoint().TokenURL,
		Scopes: scopes, AuthStyle: oauth2.AuthStyleInHeader,
	}
	return cc.Token(ctx)
}

func TestZitadelOPDiscoveryAndJWKS(t *testing.T) {
	t.Parallel()
	o := startZitadelOP(t)

	var disc struct {
		Issuer           string   `json:"issuer"`
		JWKSURI          string   `json:"jwks_uri"`
		TokenEndpoint    string   `json:"token_endpoint"`
		GrantTypes       []string `json:"grant_types_supported"`
		IDTokenSigningAl []string `json:"id_token_signing_alg_values_supported"`
	}
	o.getJSON(t, o.issuer+"/.well-known/openid-configuration", &disc)
	require.Equal(t, o.issuer, disc.Issuer, "the issuer the gateway is configured with")
	require.NotEmpty(t, disc.JWKSURI)
	require.NotEmpty(t, disc.TokenEndpoint)
	require.Contains(t, disc.GrantTypes, "client_credentials")
	require.Contains(t, disc.IDTokenSigningAl, "RS256")

	var jwks jose.JSONWebKeySet
	o.getJSON(t, disc.JWKSURI, &jwks)
	require.Len(t, jwks.Keys, 1)
	k := jwks.Keys[0]
	require.NotEmpty(t, k.KeyID)
	require.Equal(t, "RS256", k.Algorithm)
	require.Equal(t, "sig", k.Use)
	require.True(t, k.Valid() && k.IsPublic())
}

func TestZitadelOPClientCredentialsToken(t *testing.T) {
	t.Parallel()
	o := startZitadelOP(t)

	tok, err := o.clientCredentialsToken(t, zitadelClientID, zitadelClientSecret, "groups")
	require.NoError(t, err)
	require.Equal(t, "Bearer", tok.Type())

	// The token is a JWS signed with the key the OP publishes.
	var jwks jose.JSONWebKeySet
	o.getJSON(t, o.issuer+"/keys", &jwks)
	jws, err := jose.ParseSignedCompact(tok.AccessToken, []jose.SignatureAlgorithm{jose.RS256})
	require.NoError(t, err)
	require.Equal(t, jwks.Keys[0].KeyID, jws.Signatures[0].Header.KeyID)

	ic := config.Issuer{
		URL:       o.issuer,
		Audiences: []string{testAudience},
		ClaimMappings: config.ClaimMappings{
			Username: config.ClaimOrExpression{Claim: "client_id", Prefix: "svc:"},
			Credentials: config.CredentialMappings{
				KubernetesUser: config.ClaimOrExpression{Expression: `"zitadel:" + claims.sub`},
			},
		},
		ClaimValidationRules: []config.ClaimValidationRule{{Expression: "claims.email_verified == true", Message: "unverified e-mail"}},
		GroupRoles:           []config.GroupRole{{Group: "deployers", AWSRoleARN: "arn:aws:iam::123456789012:role/deploy"}},
	}
	// The OP stamps real times on its tokens: run on the real clock.
	a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{ic}, AdminGroups: []string{"ci"}}, auth.WithClock(time.Now))

	p, err := a.Authenticate(context.Background(), tok.AccessToken)
	require.NoError(t, err)
	require.Equal(t, principal.Principal{
		Issuer:   o.issuer,
		Subject:  zitadelClientID,
		Username: "svc:" + zitadelClientID,
		Email:    "ci@example.test",
		Groups:   []string{"ci", "deployers"},
		Credentials: principal.Credentials{
			KubernetesUser:   "zitadel:" + zitadelClientID,
			KubernetesGroups: []string{},
			AWSRoleARN:       "arn:aws:iam::123456789012:role/deploy",
		},
		Admin: true,
	}, p)

	t.Run("NotOurAudience", func(t *testing.T) {
		t.Parallel()
		ic := config.Issuer{URL: o.issuer, Audiences: []string{"another-api"}}
		a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{ic}}, auth.WithClock(time.Now))
		_, err := a.Authenticate(context.Background(), tok.AccessToken)
		requireAuthError(t, err, "invalid_token", "token audience [sandgate] does not include one of [another-api]")
	})

	t.Run("ExpiredByTheGatewaysClock", func(t *testing.T) {
		t.Parallel()
		a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{ic}}, auth.WithClock(func() time.Time { return time.Now().Add(time.Hour) }))
		_, err := a.Authenticate(context.Background(), tok.AccessToken)
		requireAuthError(t, err, "invalid_token", "token expired at")
	})
}

func TestZitadelOPOpaqueTokenRejected(t *testing.T) {
	t.Parallel()
	o := startZitadelOP(t)

	// The example storage's own service client gets an opaque (encrypted) access token: the
	// gateway verifies JWTs only, and says so.
	tok, err := o.clientCredentialsToken(t, exampleServiceID, exampleServiceSecret)
	require.NoError(t, err)
	require.NotEmpty(t, tok.AccessToken)

	a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{{URL: o.issuer, Audiences: []string{testAudience}}}}, auth.WithClock(time.Now))
	_, err = a.Authenticate(context.Background(), tok.AccessToken)
	requireAuthError(t, err, "invalid_token", "malformed token")

	// And the OP refuses a wrong secret before any token exists.
	_, err = o.clientCredentialsToken(t, zitadelClientID, "wrong")
	require.Error(t, err)
	var re *oauth2.RetrieveError
	require.ErrorAs(t, err, &re)
	require.Equal(t, "invalid_client", re.ErrorCode)
}
