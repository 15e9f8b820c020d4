package auth_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/principal"
)

// problemCall is one invocation of the ProblemWriter.
type problemCall struct {
	status              int
	kind, title, detail string
}

// problemRecorder is a ProblemWriter that records its calls and writes the status.
type problemRecorder struct {
	mu    sync.Mutex
	calls []problemCall
}

func (p *problemRecorder) write(w http.ResponseWriter, _ *http.Request, status int, kind, title, detail string) {
	p.mu.Lock()
	p.calls = append(p.calls, problemCall{status, kind, title, detail})
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
}

func (p *problemRecorder) only(t *testing.T) problemCall {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	require.Len(t, p.calls, 1)
	return p.calls[0]
}

// nextHandler records the principal the protected handler saw.
type nextHandler struct {
	called bool
	p      principal.Principal
	ok     bool
}

func (n *nextHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n.called = true
	n.p, n.ok = principal.FromContext(r.Context())
	w.WriteHeader(http.StatusNoContent)
}

func TestMiddleware(t *testing.T) {
	t.Parallel()

	type want struct {
		status    int
		challenge string // exact WWW-Authenticate, "" = none
		kind      string
		detail    []string
		reason    string // what the failure observer is told (auth.Reason*); "" = nothing
	}
	tests := []struct {
		name   string
		header func(t *testing.T, s *jwksServer) string // Authorization header; "" = none sent
		// down makes the issuer's discovery fail.
		down     bool
		resolved auth.Resolved
		want     want
	}{
		{
			name:   "NoHeader",
			header: func(*testing.T, *jwksServer) string { return "" },
			want: want{
				status:    http.StatusUnauthorized,
				challenge: `Bearer realm="sandgate"`,
				kind:      "unauthenticated",
				detail:    []string{"missing bearer token", "Authorization: Bearer <JWT or API key>"},
				reason:    auth.ReasonMissing,
			},
		},
		{
			name:   "NotBearer",
			header: func(*testing.T, *jwksServer) string { return "Basic YWxpY2U6cGFzcw==" },
			want: want{
				status:    http.StatusUnauthorized,
				challenge: `Bearer realm="sandgate", error="invalid_request", error_description="the Authorization header must be 'Bearer <JWT or API key>'"`,
				kind:      "unauthenticated",
				detail:    []string{"must be 'Bearer <JWT or API key>'"},
				reason:    auth.ReasonMalformed,
			},
		},
		{
			name:   "BearerWithoutToken",
			header: func(*testing.T, *jwksServer) string { return "Bearer   " },
			want: want{
				status:    http.StatusUnauthorized,
				challenge: `Bearer realm="sandgate", error="invalid_request", error_description="the Authorization header must be 'Bearer <JWT or API key>'"`,
				kind:      "unauthenticated",
				reason:    auth.ReasonMalformed,
			},
		},
		{
			name:   "GarbageToken",
			header: func(*testing.T, *jwksServer) string { return "Bearer not-a-jwt" },
			want: want{
				status:    http.StatusUnauthorized,
				challenge: `Bearer realm="sandgate", error="invalid_token", error_description="malformed token: a JWT has three dot-separated parts (JWE is not accepted)"`,
				kind:      "unauthenticated",
				detail:    []string{"malformed token"},
				reason:    auth.ReasonMalformed,
			},
		},
		{
			// The description quotes the issuer; the challenge drops the quotes (RFC 6750
			// allows no '"' inside error_description) while the problem detail keeps them.
			name: "UntrustedIssuer",
			header: func(t *testing.T, s *jwksServer) string {
				return "Bearer " + keyA().sign(t, s.claims(map[string]any{"iss": "https://evil.example"}))
			},
			want: want{
				status:    http.StatusUnauthorized,
				challenge: `Bearer realm="sandgate", error="invalid_token", error_description="token issuer https://evil.example is not trusted by this gateway"`,
				kind:      "unauthenticated",
				detail:    []string{`token issuer "https://evil.example" is not trusted`},
				reason:    auth.ReasonUntrustedIssuer,
			},
		},
		{
			name: "ExpiredToken",
			header: func(t *testing.T, s *jwksServer) string {
				return "Bearer " + keyA().sign(t, s.claims(map[string]any{"exp": testNow.Add(-time.Hour).Unix()}))
			},
			want: want{
				status:    http.StatusUnauthorized,
				challenge: `Bearer realm="sandgate", error="invalid_token", error_description="token expired at 2030-03-01T11:00:00Z; request a new token from your issuer"`,
				kind:      "unauthenticated",
				detail:    []string{"token expired"},
				reason:    auth.ReasonExpired,
			},
		},
		{
			name:   "SchemeIsCaseInsensitive",
			header: func(t *testing.T, s *jwksServer) string { return "bearer " + keyA().sign(t, s.claims(nil)) },
			want:   want{status: http.StatusNoContent},
		},
		{
			name:   "IssuerDown",
			header: func(t *testing.T, s *jwksServer) string { return "Bearer " + keyA().sign(t, s.claims(nil)) },
			down:   true,
			want: want{
				status: http.StatusServiceUnavailable,
				kind:   "unavailable",
				detail: []string{"issuer unavailable", "discovery"},
				reason: auth.ReasonIssuerUnavailable,
			},
		},
		{
			name:   "ResolvedFails",
			header: func(t *testing.T, s *jwksServer) string { return "Bearer " + keyA().sign(t, s.claims(nil)) },
			resolved: func(context.Context, principal.Principal) (principal.Principal, error) {
				return principal.Principal{}, errors.New("database is down")
			},
			want: want{
				status: http.StatusServiceUnavailable,
				kind:   "unavailable",
				detail: []string{"could not record the principal: database is down"},
				reason: auth.ReasonPrincipalUnrecorded,
			},
		},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newJWKSServer(t, keyA())
			if tt.down {
				s.discoveryStatus.Store(http.StatusServiceUnavailable)
			}
			var reasons []string
			a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{s.issuerConfig()}},
				auth.WithFailureObserver(func(r string) { reasons = append(reasons, r) }))
			problems := &problemRecorder{}
			next := &nextHandler{}
			h := a.Middleware(tt.resolved, problems.write)(next)

			req := httptest.NewRequest(http.MethodGet, "/v1/sandboxes", nil)
			if hv := tt.header(t, s); hv != "" {
				req.Header.Set("Authorization", hv)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)

			require.Equal(t, tt.want.status, rec.Code)
			if tt.want.reason == "" {
				require.Empty(t, reasons)
			} else {
				require.Equal(t, []string{tt.want.reason}, reasons, "one failure, by reason")
			}
			if tt.want.status == http.StatusNoContent {
				require.True(t, next.called)
				require.True(t, next.ok)
				return
			}
			require.False(t, next.called, "the protected handler must not run")
			require.Equal(t, tt.want.challenge, rec.Header().Get("WWW-Authenticate"))
			if tt.want.status == http.StatusServiceUnavailable && tt.down {
				require.Equal(t, "5", rec.Header().Get("Retry-After"))
			}
			call := problems.only(t)
			require.Equal(t, tt.want.status, call.status)
			require.Equal(t, tt.want.kind, call.kind)
			require.NotEmpty(t, call.title)
			for _, d := range tt.want.detail {
				require.Contains(t, call.detail, d)
			}
		})
	}
}

func TestMiddlewarePassesPrincipal(t *testing.T) {
	t.Parallel()

	s := newJWKSServer(t, keyA())
	a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{s.issuerConfig()}, AdminGroups: []string{"ops"}})
	var resolvedWith principal.Principal
	resolved := func(_ context.Context, p principal.Principal) (principal.Principal, error) {
		resolvedWith = p
		p.ID = "prn_42"
		return p, nil
	}
	problems := &problemRecorder{}
	next := &nextHandler{}
	srv := httptest.NewServer(a.Middleware(resolved, problems.write)(next))
	t.Cleanup(srv.Close)

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/sandboxes", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+keyA().sign(t, s.claims(nil)))
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Empty(t, resp.Header.Get("WWW-Authenticate"))
	require.Empty(t, problems.calls)
	require.True(t, next.called)
	require.True(t, next.ok, "principal.FromContext must find the principal")
	require.Equal(t, "prn_42", next.p.ID, "the handler sees the principal as Resolved returned it")
	require.Equal(t, s.issuer, next.p.Issuer)
	require.Equal(t, "u-123", next.p.Subject)
	require.Equal(t, []string{"dev", "ops"}, next.p.Groups)
	require.True(t, next.p.Admin)
	require.Empty(t, resolvedWith.ID)
	require.Equal(t, next.p.Subject, resolvedWith.Subject)
}

func TestMiddlewareChallengeIsSanitized(t *testing.T) {
	t.Parallel()

	// A description carrying quotes, a backslash and a newline cannot break out of the
	// quoted-string in the challenge.
	s := newJWKSServer(t, keyA())
	a := newAuthenticator(t, config.Auth{Issuers: []config.Issuer{s.issuerConfig()}})
	problems := &problemRecorder{}
	h := a.Middleware(nil, problems.write)(&nextHandler{})

	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Authorization", "Bearer "+keyA().sign(t, s.claims(map[string]any{"iss": "x\", error=\"ok\\\n"})))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)

	require.Equal(t, http.StatusUnauthorized, rec.Code)
	challenge := rec.Header().Get("WWW-Authenticate")
	require.True(t, strings.HasPrefix(challenge, `Bearer realm="sandgate", error="invalid_token", error_description="`), challenge)
	require.Equal(t, 6, strings.Count(challenge, `"`), "only the three quoted-strings' own quotes: %s", challenge)
	require.NotContains(t, challenge, "\\")
	require.NotContains(t, challenge, "\n")
}
