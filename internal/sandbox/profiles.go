package sandbox

import (
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox/profile"
)

// The profile room (internal/sandbox/profile) owns profiles, who may use them and the
// fail-closed checks; the domain's API keeps speaking of them under its own names.

// ProfileSpec is one workload profile as the composition root hands it to the domain
// (profile.Spec).
type ProfileSpec = profile.Spec

// Profile is a configured workload profile with its provider (profile.Profile).
type Profile = profile.Profile

// Scopes (docs/semantics.md §8).
const (
	ScopePerCall    = profile.ScopePerCall
	ScopePerSession = profile.ScopePerSession
	ScopePerRuntime = profile.ScopePerRuntime
)

// Identity modes (docs/semantics.md §9).
const (
	IdentityAgent = profile.IdentityAgent
	IdentityUser  = profile.IdentityUser
)

// What the idle sweeper does with a session idle past its profile's idle_timeout
// (profile.IdleReset and its kin).
const (
	IdleReset    = profile.IdleReset
	IdlePause    = profile.IdlePause
	IdleSnapshot = profile.IdleSnapshot
)

// providerPrincipal is whom the provider acts for (profile.ProviderPrincipal).
func providerPrincipal(prof *Profile, p principal.Principal) providers.Principal {
	return profile.ProviderPrincipal(prof, p)
}

// agentPrincipal is the gateway acting for itself (profile.Agent).
var agentPrincipal = profile.Agent

// allowed reports whether p may use prof (profile.Allowed).
func allowed(p principal.Principal, prof *Profile) bool { return profile.Allowed(p, prof) }

// keyRefusal is profile.KeyRefusal.
func keyRefusal(p principal.Principal, name string) error { return profile.KeyRefusal(p, name) }
