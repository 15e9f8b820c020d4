package principal_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/principal"
)

func TestPrincipalKey(t *testing.T) {
	t.Parallel()

	p := principal.Principal{Issuer: "https://idp.example", Subject: "u-1"}
	require.Equal(t, "https://idp.example#u-1", p.Key())
	q := principal.Principal{Issuer: "https://other.example", Subject: "u-1"}
	require.NotEqual(t, p.Key(), q.Key(), "the same subject at two issuers is two principals")
}

func TestPrincipalInAnyGroup(t *testing.T) {
	t.Parallel()

	p := principal.Principal{Groups: []string{"dev", "ops"}}
	tests := []struct {
		name   string
		groups []string
		want   bool
	}{
		{"OneMatches", []string{"admins", "ops"}, true},
		{"NoneMatch", []string{"admins"}, false},
		{"EmptyList", nil, false},
		{"CaseSensitive", []string{"OPS"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, p.InAnyGroup(tt.groups))
		})
	}
	require.False(t, principal.Principal{}.InAnyGroup([]string{"dev"}))
}

func TestContext(t *testing.T) {
	t.Parallel()

	_, ok := principal.FromContext(context.Background())
	require.False(t, ok)

	p := principal.Principal{Issuer: "https://idp.example", Subject: "u-1", Username: "alice"}
	got, ok := principal.FromContext(principal.NewContext(context.Background(), p))
	require.True(t, ok)
	require.Equal(t, p, got)
}

func TestMayUseProfile(t *testing.T) {
	t.Parallel()

	require.True(t, principal.Principal{}.MayUseProfile("gpu"), "a token: any profile")
	key := principal.Principal{APIKeyID: "k", KeyProfiles: []string{"default"}}
	require.True(t, key.MayUseProfile("default"))
	require.False(t, key.MayUseProfile("gpu"))
	require.False(t, principal.Principal{KeyProfiles: []string{}}.MayUseProfile("default"), "an empty list allows none")
}

// TestKeyProfilesOnTheWire: a principal crosses the queue as JSON; a key's restriction must
// arrive as it left, an empty list included (never widened to "no restriction").
func TestKeyProfilesOnTheWire(t *testing.T) {
	t.Parallel()

	for _, in := range []principal.Principal{
		{APIKeyID: "k", KeyProfiles: []string{"default"}},
		{APIKeyID: "k", KeyProfiles: []string{}},
		{},
	} {
		b, err := json.Marshal(in)
		require.NoError(t, err)
		var out principal.Principal
		require.NoError(t, json.Unmarshal(b, &out))
		require.Equal(t, in.KeyProfiles == nil, out.KeyProfiles == nil, string(b))
		require.Equal(t, in.KeyProfiles, out.KeyProfiles)
		require.Equal(t, in.APIKeyID, out.APIKeyID)
	}
}
