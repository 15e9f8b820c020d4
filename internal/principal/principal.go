// Package principal turns a verified token's claims into the caller's Principal: who they are
// (issuer + subject), their username, email and groups, and the user-mode credentials a
// provider needs to act as them (Kubernetes impersonation, AWS role, run-as user).
//
// Mappings are per issuer and follow Kubernetes' structured authentication configuration
// (JWTAuthenticator claimMappings / claimValidationRules): each field is a claim name or a
// CEL expression over `claims`; validation rules are CEL expressions that must yield true.
// A group→role table is the alternative to CEL for credentials.
package principal

import (
	"context"
	"slices"
	"time"
)

// Principal is an authenticated caller.
type Principal struct {
	// ID is the stable store id, set once the principal was recorded.
	ID          string
	Issuer      string
	Subject     string
	Username    string
	Email       string
	Groups      []string
	Credentials Credentials
	// Token is the caller's raw bearer token (an OIDC JWT), set by the auth middleware for
	// the request's own use (ec2_ssm web identity). A secret: never log, persist or serialise
	// it (json:"-" keeps it off the queue wire).
	Token string `json:"-"`
	// Admin: member of one of auth.admin_groups.
	Admin       bool
	FirstSeenAt time.Time
	LastSeenAt  time.Time
	// APIKeyID is the id of the API key the request authenticated with ("" for a token). The
	// claims above are then the key's: its maker's as they were when it was made.
	APIKeyID string `json:",omitempty"`
	// KeyProfiles, for an API key restricted to profiles, are the only profiles it may use
	// (nil: no restriction; an empty list allows none — JSON keeps the two apart).
	KeyProfiles []string
}

// MayUseProfile reports whether p's credential allows profile name: always for a token; for
// an API key restricted to profiles, only those. (Whether the principal may use the profile
// at all — allowed_groups — is the domain's question.)
func (p Principal) MayUseProfile(name string) bool {
	return p.KeyProfiles == nil || slices.Contains(p.KeyProfiles, name)
}

// Credentials are user-mode identity inputs resolved from claims. None is a secret.
type Credentials struct {
	KubernetesUser   string
	KubernetesGroups []string
	AWSRoleARN       string
	RunAs            string
}

// Key is "issuer#subject", unique per principal.
func (p Principal) Key() string { return p.Issuer + "#" + p.Subject }

// InAnyGroup reports whether p is a member of at least one of groups.
func (p Principal) InAnyGroup(groups []string) bool {
	for _, g := range groups {
		if slices.Contains(p.Groups, g) {
			return true
		}
	}
	return false
}

type ctxKey struct{}

// NewContext returns ctx carrying p. Only the HTTP edge sets it; the domain receives the
// principal as an explicit argument.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal set by NewContext.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}
