package auth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/sandgate/sandgate/internal/principal"
)

// Resolved is called with each authenticated principal; it may enrich it (store id,
// first/last seen) or fail (the request then gets a 503).
type Resolved func(ctx context.Context, p principal.Principal) (principal.Principal, error)

// ProblemWriter writes an RFC 9457 problem response; internal/api supplies it so every
// error body has one shape.
type ProblemWriter func(w http.ResponseWriter, r *http.Request, status int, kind, title, detail string)

// MiddlewareOption adjusts Middleware.
type MiddlewareOption func(*middlewareOptions)

type middlewareOptions struct {
	resourceMetadata string
	credential       func(*http.Request) (string, error)
}

// WithCredential reads each request's credential with read instead of from
// `Authorization: Bearer` (an edge whose clients send it elsewhere: the E2B door's
// X-API-KEY). An error it returns refuses the request as a missing or malformed credential
// would be (an *Error keeps its reason).
func WithCredential(read func(*http.Request) (string, error)) MiddlewareOption {
	return func(o *middlewareOptions) { o.credential = read }
}

// WithResourceMetadata adds the RFC 9728 `resource_metadata="<url>"` parameter to the 401
// challenge, pointing clients (MCP) at the protected resource metadata document.
func WithResourceMetadata(url string) MiddlewareOption {
	return func(o *middlewareOptions) { o.resourceMetadata = url }
}

// Middleware authenticates every request: without a valid bearer token or API key the
// request ends with 401 and an RFC 6750 WWW-Authenticate challenge; with one, the principal
// is in the request context (principal.FromContext).
func (a *Authenticator) Middleware(resolved Resolved, problem ProblemWriter, opts ...MiddlewareOption) func(http.Handler) http.Handler {
	var mo middlewareOptions
	for _, o := range opts {
		o(&mo)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, span := a.tracer.Start(r.Context(), "auth.authenticate")
			read := bearer
			if mo.credential != nil {
				read = mo.credential
			}
			raw, err := read(r)
			if err == nil {
				var p principal.Principal
				p, err = a.Authenticate(ctx, raw)
				if p.APIKeyID == "" {
					p.Token = raw // for providers exchanging the caller's own token; never logged
				}
				if err == nil && resolved != nil {
					p, err = resolved(ctx, p)
					if err != nil {
						a.refused(span, ReasonPrincipalUnrecorded)
						problem(w, r, http.StatusServiceUnavailable, "unavailable", "Service unavailable", "could not record the principal: "+err.Error())
						return
					}
				}
				if err == nil {
					span.SetAttributes(attribute.Bool("sandgate.admin", p.Admin))
					span.End()
					next.ServeHTTP(w, r.WithContext(principal.NewContext(r.Context(), p)))
					return
				}
			}
			if errors.Is(err, ErrIssuerUnavailable) {
				a.refused(span, ReasonIssuerUnavailable)
				w.Header().Set("Retry-After", "5")
				problem(w, r, http.StatusServiceUnavailable, "unavailable", "Issuer unavailable", err.Error())
				return
			}
			if errors.Is(err, ErrKeysUnavailable) {
				a.refused(span, ReasonKeysUnavailable)
				w.Header().Set("Retry-After", "5")
				// The cause (addresses, user names) is logged, not shown.
				a.log.Warn("an API key could not be checked", "err", err)
				problem(w, r, http.StatusServiceUnavailable, "unavailable", "Service unavailable",
					"the API key could not be checked: the gateway's response store (Postgres) does not answer; retry after Retry-After seconds")
				return
			}
			var ae *Error
			if !errors.As(err, &ae) {
				ae = &Error{Code: "invalid_token", Description: err.Error(), Reason: ReasonSignature}
			}
			a.refused(span, ae.Reason)
			challenge := `Bearer realm="sandgate"`
			if mo.resourceMetadata != "" {
				challenge += fmt.Sprintf(`, resource_metadata=%q`, mo.resourceMetadata)
			}
			if ae.Code != "" {
				challenge += fmt.Sprintf(`, error=%q, error_description=%q`, ae.Code, sanitize(ae.Description))
			}
			w.Header().Set("WWW-Authenticate", challenge)
			problem(w, r, http.StatusUnauthorized, "unauthenticated", "Unauthenticated", ae.Description)
		})
	}
}

// refused ends an authentication's span as failed for reason and reports it.
func (a *Authenticator) refused(span trace.Span, reason string) {
	span.SetAttributes(attribute.String("sandgate.auth.failure", reason))
	span.SetStatus(codes.Error, reason)
	span.End()
	a.failed(reason)
}

func bearer(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", &Error{Description: "missing bearer token: send 'Authorization: Bearer <JWT or API key>' (in dev mode, `gateway token` prints a JWT)", Reason: ReasonMissing}
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return "", &Error{Code: "invalid_request", Description: "the Authorization header must be 'Bearer <JWT or API key>'", Reason: ReasonMalformed}
	}
	return strings.TrimSpace(tok), nil
}

// sanitize keeps an error_description within RFC 6750's allowed characters.
func sanitize(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '"' && c != '\\' {
			b = append(b, c)
		}
	}
	return string(b)
}
