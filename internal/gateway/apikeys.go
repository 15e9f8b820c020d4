package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/sandgate/sandgate/internal/auth"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/store"
	"github.com/sandgate/sandgate/internal/store/postgres"
)

// keyLookup is how authentication reads API keys: by their secret's hash from the store,
// one statement that also records the use at most once a minute (postgres.Store.UseAPIKey).
func keyLookup(st *postgres.Store) auth.KeyLookup {
	return func(ctx context.Context, hash [32]byte, now time.Time) (auth.APIKey, error) {
		k, err := st.UseAPIKey(ctx, hash[:], now)
		if errors.Is(err, store.ErrNotFound) {
			return auth.APIKey{}, auth.ErrUnknownKey
		}
		if err != nil {
			return auth.APIKey{}, err
		}
		c := k.Credentials
		out := auth.APIKey{
			ID: k.ID, Hash: k.Hash, Display: k.Prefix, Profiles: k.Profiles, ExpiresAt: k.ExpiresAt,
			Principal: principal.Principal{
				ID: k.PrincipalID, Issuer: k.Issuer, Subject: k.Subject, Username: k.Username, Email: k.Email, Groups: k.Groups,
				Credentials: principal.Credentials{KubernetesUser: c.KubernetesUser, KubernetesGroups: c.KubernetesGroups, AWSRoleARN: c.AWSRoleARN, RunAs: c.RunAs},
			},
		}
		if k.RevokedAt != nil {
			out.RevokedAt = *k.RevokedAt
		}
		return out, nil
	}
}

// apiKeySettings maps auth.api_keys onto the domain's settings.
func apiKeySettings(c config.APIKeys) sandbox.APIKeySettings {
	return sandbox.APIKeySettings{DefaultTTL: c.DefaultTTL.D(), MaxTTL: c.MaxTTL.D(), MaxPerPrincipal: c.MaxPerPrincipal}
}
