package sandbox

import (
	"context"

	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox/secret"
	"github.com/sandgate/sandgate/internal/store"
)

// Secret is a secret as its owner sees it, never its value (secret.Secret).
type Secret = secret.Secret

// SecretEnvName is the variable a session's programs find secret name's placeholder in
// (SANDGATE_SECRET_<NAME>).
func SecretEnvName(name string) string { return secret.EnvName(name) }

// SetSecret creates p's secret name or replaces its value and hosts (secret.Room.Set);
// created says which.
func (s *Service) SetSecret(ctx context.Context, p principal.Principal, name string, value []byte, hosts []string) (Secret, bool, error) {
	return s.secrets.Set(ctx, p, name, value, hosts)
}

// ListSecrets returns p's secrets by name, without values.
func (s *Service) ListSecrets(ctx context.Context, p principal.Principal) ([]Secret, error) {
	return s.secrets.List(ctx, p)
}

// DeleteSecret removes p's secret name (fault.NotFound when p keeps none of that name).
func (s *Service) DeleteSecret(ctx context.Context, p principal.Principal, name string) error {
	return s.secrets.Delete(ctx, p, name)
}

// ResealSecrets re-seals every stored secret not sealed under the first configured key (the
// second step of a key rotation; docs/semantics.md §15) and returns how many.
func (s *Service) ResealSecrets(ctx context.Context) (int, error) { return s.secrets.Reseal(ctx) }

// sessionSecrets are the bindings (name → placeholder) a new session of owner in prof keeps:
// the secrets named and the profile's own.
func (s *Service) sessionSecrets(ctx context.Context, owner string, prof *Profile, names []string) (map[string]string, error) {
	return s.secrets.Placeholders(ctx, owner, prof.Name, prof.Secrets, names)
}

// sessionPolicy is the policy sess's sandbox is created, attached and restored with: its
// profile's, lowered by the session's cpu and memory_mb, with its secrets bound (values
// opened here, for the provider's egress proxy; a provider that cannot keep them out of the
// sandbox refuses the policy).
func (s *Service) sessionPolicy(ctx context.Context, prof *Profile, sess store.Session) (providers.Policy, error) {
	pol := prof.PolicyWithin(sess.CPU, sess.MemoryMB)
	bindings, err := s.secrets.Bindings(ctx, sess.OwnerID, prof.Secrets, sess.Secrets)
	if err != nil {
		return providers.Policy{}, err
	}
	pol.Secrets = bindings
	return pol, nil
}

// outputSecrets are the bindings of sess's secrets for redacting its output (redactSecrets):
// none for a session without secrets; a failure to open them is logged and redacts nothing.
func (s *Service) outputSecrets(ctx context.Context, prof *Profile, sess store.Session) []providers.SecretBinding {
	if len(sess.Secrets) == 0 {
		return nil
	}
	b, err := s.secrets.Bindings(ctx, sess.OwnerID, prof.Secrets, sess.Secrets)
	if err != nil {
		s.log.Warn("opening a session's secrets to redact its output failed", "session_id", sess.ID, "err", err)
		return nil
	}
	return b
}
