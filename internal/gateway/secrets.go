package gateway

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/secret"
	"github.com/sandgate/sandgate/internal/store/postgres"
)

// secretKeyring is the keyring of secrets.keys (docs/semantics.md §15); none configured: a
// keyring without keys, which refuses secrets with a problem naming the setting.
func secretKeyring(c config.Secrets) (*secret.Keyring, error) {
	ring, err := secret.ParseKeys(c.Keys)
	if err != nil {
		return nil, fmt.Errorf("invalid configuration: %w", err)
	}
	return ring, nil
}

// profileSecrets reads the values of profile name's own secrets (sandbox.profiles.<name>.secrets)
// from the gateway's environment (getenv) or files, and checks their names and hosts.
func profileSecrets(name string, specs []config.ProfileSecret, getenv func(string) string) ([]providers.SecretBinding, error) {
	out := make([]providers.SecretBinding, 0, len(specs))
	seen := map[string]bool{}
	for i, s := range specs {
		at := fmt.Sprintf("sandbox.profiles.%s.secrets[%d]", name, i)
		if err := secret.CheckName(s.Name); err != nil {
			return nil, fmt.Errorf("%s.name: %w", at, err)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("%s.name: %q is given twice", at, s.Name)
		}
		seen[s.Name] = true
		hosts, err := secret.CheckHosts(s.Hosts)
		if err != nil {
			return nil, fmt.Errorf("%s.hosts: %w", at, err)
		}
		var value []byte
		switch {
		case (s.ValueEnv == "") == (s.ValueFile == ""):
			return nil, fmt.Errorf("%s: give exactly one of value_env (a variable of the gateway's environment) and value_file", at)
		case s.ValueEnv != "":
			value = []byte(getenv(s.ValueEnv))
			if len(value) == 0 {
				return nil, fmt.Errorf("%s.value_env: the gateway's environment variable %s is unset or empty", at, s.ValueEnv)
			}
		default:
			if value, err = os.ReadFile(s.ValueFile); err != nil {
				return nil, fmt.Errorf("%s.value_file: %w", at, err)
			}
			value = bytes.TrimSuffix(bytes.TrimSuffix(value, []byte("\n")), []byte("\r"))
			if len(value) == 0 {
				return nil, fmt.Errorf("%s.value_file: %s is empty", at, s.ValueFile)
			}
		}
		if len(value) > secret.MaxValueBytes {
			return nil, fmt.Errorf("%s: the value is %d bytes; at most %d", at, len(value), secret.MaxValueBytes)
		}
		out = append(out, providers.SecretBinding{Name: s.Name, Hosts: hosts, Value: value})
	}
	return out, nil
}

// ResealSecrets re-seals every stored secret not sealed under the first key of
// secrets.keys, on the database at url, and returns how many it re-sealed: the second step
// of a key rotation (put the new key first, reseal, then remove the old key; docs/semantics.md
// §15). Every key a secret is sealed under must still be configured.
func ResealSecrets(ctx context.Context, url string, c config.Secrets) (int, error) {
	ring, err := secretKeyring(c)
	if err != nil {
		return 0, err
	}
	st, err := postgres.Open(ctx, url, 2)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	room := secret.New(secret.Options{Store: st, Keys: ring, Clock: sandbox.SystemClock{}, Log: slog.Default()})
	return room.Reseal(ctx)
}
