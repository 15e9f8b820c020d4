package profile_test

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox/profile"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

func fake(caps providers.Capabilities) providers.Provider {
	return sandboxtest.NewProvider(sandboxtest.ProviderOptions{Capabilities: caps})
}

// A set refuses profiles it could not serve before anything runs: no provider, an idle
// action the provider cannot carry out or the profile cannot have, a name given twice.
func TestNewSetRefusesWhatItCannotServe(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	base := sandboxtest.DefaultCapabilities()
	for name, specs := range map[string][]profile.Spec{
		"no provider":       {{Name: "a"}},
		"pause unsupported": {{Name: "a", Scope: profile.ScopePerSession, IdleAction: profile.IdlePause, Provider: fake(base)}},
		"per_call parks":    {{Name: "a", Scope: profile.ScopePerCall, IdleAction: profile.IdleSnapshot, Provider: fake(base)}},
		"unknown action":    {{Name: "a", IdleAction: "sleep", Provider: fake(base)}},
		"twice":             {{Name: "a", Provider: fake(base)}, {Name: "a", Provider: fake(base)}},
	} {
		_, err := profile.NewSet(specs, "a", log)
		require.Error(t, err, name)
	}
	set, err := profile.NewSet([]profile.Spec{{Name: "b", Provider: fake(base)}, {Name: "a", Provider: fake(base)}}, "a", log)
	require.NoError(t, err)
	require.Equal(t, "a", set.All()[0].Name, "sorted by name")
	require.True(t, set.Get("a").Default)
	require.Nil(t, set.Get("c"))
}

// Resolve names only the profiles the caller may use when it asks for an unknown one, and
// refuses restricted profiles and profiles an API key was not made for.
func TestResolve(t *testing.T) {
	base := sandboxtest.DefaultCapabilities()
	set, err := profile.NewSet([]profile.Spec{
		{Name: "open", Provider: fake(base)},
		{Name: "secret", AllowedGroups: []string{"ops"}, Provider: fake(base)},
	}, "open", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	alice := principal.Principal{Subject: "alice"}

	prof, err := set.Resolve(alice, "")
	require.NoError(t, err)
	require.Equal(t, "open", prof.Name, "the default")

	_, err = set.Resolve(alice, "nope")
	require.Equal(t, fault.Config, fault.KindOf(err))
	require.Contains(t, err.Error(), "[open]", "restricted profiles stay hidden")

	_, err = set.Resolve(alice, "secret")
	require.Equal(t, fault.Forbidden, fault.KindOf(err))
	_, err = set.Resolve(principal.Principal{Subject: "bob", Groups: []string{"ops"}}, "secret")
	require.NoError(t, err)

	keyed := principal.Principal{Subject: "alice", KeyProfiles: []string{"secret"}}
	_, err = set.Resolve(keyed, "open")
	require.Equal(t, fault.Forbidden, fault.KindOf(err))
	require.Empty(t, set.Usable(keyed), "the key's one profile is restricted to ops")
}

// Checks fail closed: user identity needs a provider that can act as the user and a user; a
// strict policy the provider cannot enforce is refused; a non-strict one runs with a warning,
// logged once.
func TestChecksFailClosed(t *testing.T) {
	var logged bytes.Buffer
	base := sandboxtest.DefaultCapabilities()
	userCaps := base
	userCaps.PrincipalUser = true
	set, err := profile.NewSet([]profile.Spec{
		{Name: "user", IdentityMode: profile.IdentityUser, Provider: fake(base)},
		{Name: "user-ok", IdentityMode: profile.IdentityUser, Provider: fake(userCaps)},
		{Name: "strict", Policy: providers.Policy{NetworkEgress: providers.EgressDeny, Strict: true}, Provider: fake(base)},
		{Name: "lax", Policy: providers.Policy{NetworkEgress: providers.EgressDeny}, Provider: fake(base)},
	}, "user", slog.New(slog.NewTextHandler(&logged, nil)))
	require.NoError(t, err)
	alice := principal.Principal{Subject: "alice", Username: "alice"}

	_, err = set.Checks(set.Get("user"), alice)
	require.Equal(t, fault.Capability, fault.KindOf(err))
	_, err = set.Checks(set.Get("user-ok"), principal.Principal{})
	require.Equal(t, fault.Policy, fault.KindOf(err))
	_, err = set.Checks(set.Get("user-ok"), alice)
	require.NoError(t, err)
	require.Equal(t, "alice", profile.ProviderPrincipal(set.Get("user-ok"), alice).Subject)
	require.Equal(t, profile.Agent, profile.ProviderPrincipal(set.Get("lax"), alice))

	_, err = set.Checks(set.Get("strict"), alice)
	require.Equal(t, fault.Policy, fault.KindOf(err))
	for range 2 {
		warnings, err := set.Checks(set.Get("lax"), alice)
		require.NoError(t, err)
		require.Len(t, warnings, 1)
	}
	require.Equal(t, 1, bytes.Count(logged.Bytes(), []byte("of profile 'lax'")), "warned once: %s", logged.String())
}
