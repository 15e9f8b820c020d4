// Package secret is the domain's secrets room (issue 39; docs/semantics.md §15): the named
// secrets a principal keeps — set (create or replace), listed without their values,
// deleted, never read back — and the secrets an operator gives a profile; and, for a
// session, the bindings its sandbox is created and attached with: the placeholder the
// sandbox sees (SANDGATE_SECRET_<NAME>) and the value the egress proxy puts in its place in
// requests to the secret's hosts (providers.SecretBinding). Values are sealed at rest with
// the Keyring (AES-256-GCM) and opened only to build a binding.
package secret

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox/clock"
	"github.com/sandgate/sandgate/internal/store"
)

// Limits of a secret (the API's contract states them too).
const (
	// MaxValueBytes bounds a value: header-sized credentials, not files.
	MaxValueBytes = 16 << 10
	// MaxHosts bounds the host patterns of one secret.
	MaxHosts = 32
	// MaxPerSession bounds the secrets one session binds.
	MaxPerSession = 32
	// DefaultLimit is how many secrets a principal may keep unless Options.Limit says.
	DefaultLimit = 100
	// PlaceholderPrefix starts every placeholder: sgs_ and 32 base32 characters (160 random bits).
	PlaceholderPrefix = "sgs_"
	// EnvPrefix starts the variable holding a secret's placeholder (EnvName).
	EnvPrefix = "SANDGATE_SECRET_"
)

// namePattern is a secret's name: lower-case letters, digits, '_' and '-', starting with a
// letter, at most 63 characters (providers.SecretBinding.Name).
var namePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// hostLabel is one label of a host name.
var hostLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Secret is a secret as its owner sees it: never its value.
type Secret struct {
	Name  string
	Hosts []string
	// Profile is the profile an operator set it for ("" for the principal's own).
	Profile   string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Store is what the room keeps in the store.
type Store interface {
	store.Secrets
}

// Options build a Room.
type Options struct {
	Store Store
	Keys  *Keyring
	Clock clock.Clock
	// Record writes an audit event of p (the account room's Record).
	Record func(ctx context.Context, p principal.Principal, e store.AuditEvent)
	// Limit is how many secrets a principal may keep (0: DefaultLimit).
	Limit int
	// Rand is the source of placeholders (nil: crypto/rand).
	Rand io.Reader
	Log  *slog.Logger
}

// Room is the secrets room. Build it with New.
type Room struct {
	store  Store
	keys   *Keyring
	clock  clock.Clock
	record func(ctx context.Context, p principal.Principal, e store.AuditEvent)
	limit  int
	rand   io.Reader
	log    *slog.Logger
}

// New returns the room.
func New(o Options) *Room {
	r := &Room{store: o.Store, keys: o.Keys, clock: o.Clock, record: o.Record, limit: o.Limit, rand: o.Rand, log: o.Log}
	if r.limit <= 0 {
		r.limit = DefaultLimit
	}
	if r.rand == nil {
		r.rand = rand.Reader
	}
	if r.record == nil {
		r.record = func(context.Context, principal.Principal, store.AuditEvent) {}
	}
	return r
}

// EnvName is the variable holding secret name's placeholder: EnvPrefix and the name
// upper-cased, '-' as '_' (SANDGATE_SECRET_OPENAI for "openai").
func EnvName(name string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// CheckName refuses a name that is not a secret's: fault.Validation saying what one is.
func CheckName(name string) error {
	if !namePattern.MatchString(name) {
		return fault.New(fault.Validation, "secret name %q: use 1-63 lower-case letters, digits, '_' or '-', starting with a letter (it becomes the variable %sNAME)", name, EnvPrefix)
	}
	return nil
}

// CheckHosts refuses host patterns a secret may not be sent to: none, more than MaxHosts, or
// one that is not a host name, a wildcard "*." and a host name, or an IP address, each with
// an optional ":port" (1–65535) — network_allow's names, without CIDRs, schemes or paths.
// Patterns are lower-cased; the result is sorted without duplicates.
func CheckHosts(hosts []string) ([]string, error) {
	if len(hosts) == 0 {
		return nil, fault.New(fault.Validation, "a secret needs at least one host it may be sent to (hosts: [\"api.example.com\"]); the egress proxy substitutes it only in requests to those")
	}
	if len(hosts) > MaxHosts {
		return nil, fault.New(fault.Validation, "a secret may name at most %d hosts; it names %d", MaxHosts, len(hosts))
	}
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if err := checkHost(h); err != nil {
			return nil, fault.New(fault.Validation, "secret host %q: %s; give a host name (api.example.com), a wildcard (*.example.com) or an IP address, with an optional :port", h, err)
		}
		out = append(out, h)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func checkHost(h string) error {
	host := h
	if strings.HasPrefix(h, "[") || strings.Count(h, ":") == 1 {
		hp, portText, err := net.SplitHostPort(h)
		if err != nil {
			return errors.New("not host:port")
		}
		if port, err := strconv.Atoi(portText); err != nil || port < 1 || port > 65535 {
			return errors.New("the port must be 1-65535")
		}
		host = hp
	}
	if ip := net.ParseIP(host); ip != nil {
		return nil
	}
	name := strings.TrimPrefix(host, "*.")
	if name == "" || len(name) > 253 || strings.ContainsAny(name, "*/@ ") {
		return errors.New("not a host name")
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if !hostLabel.MatchString(l) {
			return fmt.Errorf("%q is not a host name label", l)
		}
	}
	if strings.HasPrefix(host, "*.") && len(labels) < 2 {
		return errors.New("a wildcard needs a domain of at least two labels (*.example.com)")
	}
	return nil
}

func view(row store.Secret) Secret {
	return Secret{Name: row.Name, Hosts: row.Hosts, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt}
}

// Set creates p's secret name, or replaces its value and hosts, and returns it (created
// says which). The value is sealed under the keyring's first key: setting a secret again
// also re-seals it after a key rotation.
//
// Errors: fault.Validation for a bad name or hosts, or an empty value; fault.TooLarge for a
// value over MaxValueBytes; fault.Quota when p already keeps the limit of secrets;
// fault.Config when the gateway has no key (NoKey).
func (r *Room) Set(ctx context.Context, p principal.Principal, name string, value []byte, hosts []string) (Secret, bool, error) {
	if err := CheckName(name); err != nil {
		return Secret{}, false, err
	}
	hosts, err := CheckHosts(hosts)
	if err != nil {
		return Secret{}, false, err
	}
	if len(value) == 0 {
		return Secret{}, false, fault.New(fault.Validation, "secret %q: the value is empty", name)
	}
	if len(value) > MaxValueBytes {
		return Secret{}, false, fault.New(fault.TooLarge, "secret %q: the value is %d bytes; at most %d", name, len(value), MaxValueBytes)
	}
	keyID, sealed, err := r.keys.Seal(p.ID, name, value)
	if err != nil {
		return Secret{}, false, err
	}
	now := r.clock.Now()
	row := store.Secret{OwnerID: p.ID, Name: name, Hosts: hosts, KeyID: keyID, Sealed: sealed, CreatedAt: now, UpdatedAt: now}
	created, err := r.store.PutSecretWithin(ctx, row, r.limit)
	if errors.Is(err, store.ErrQuota) {
		return Secret{}, false, fault.New(fault.Quota, "you keep %d secrets, the most a principal may; delete one (DELETE /v1/secrets/{name}) first", r.limit)
	}
	if err != nil {
		return Secret{}, false, err
	}
	r.record(ctx, p, store.AuditEvent{Kind: store.AuditSecretSet, Target: name, Status: "succeeded"})
	if got, err := r.store.GetSecret(ctx, p.ID, name); err == nil {
		return view(got), created, nil
	}
	return view(row), created, nil
}

// List returns p's secrets by name, never their values.
func (r *Room) List(ctx context.Context, p principal.Principal) ([]Secret, error) {
	rows, err := r.store.ListSecrets(ctx, p.ID)
	if err != nil {
		return nil, err
	}
	out := make([]Secret, 0, len(rows))
	for _, row := range rows {
		out = append(out, view(row))
	}
	return out, nil
}

// Delete removes p's secret name. Sessions that bound it keep their placeholder; their
// sandboxes get no value for it from their next create or attach on. Errors: fault.NotFound
// (also for another principal's).
func (r *Room) Delete(ctx context.Context, p principal.Principal, name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if err := r.store.DeleteSecret(ctx, p.ID, name); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return notFound(name)
		}
		return err
	}
	r.record(ctx, p, store.AuditEvent{Kind: store.AuditSecretDelete, Target: name, Status: "succeeded"})
	return nil
}

func notFound(name string) error {
	return fault.New(fault.NotFound, "secret '%s' not found; list yours with GET /v1/secrets", name)
}

// Placeholders checks the secrets a new session of owner in a profile asks for by name, and
// returns its bindings to keep with it: each name → a fresh placeholder, the profile's own
// secrets (operator) included. owner "" (a shared session) binds only the profile's.
//
// Errors: fault.Validation for a bad or repeated name, a name of the profile's own, two
// names with the same variable, or more than MaxPerSession; fault.NotFound naming a secret
// owner does not keep; fault.Config when the gateway has no key.
func (r *Room) Placeholders(ctx context.Context, owner string, profileName string, operator []providers.SecretBinding, names []string) (map[string]string, error) {
	if len(names) == 0 && len(operator) == 0 {
		return map[string]string{}, nil
	}
	if len(names)+len(operator) > MaxPerSession {
		return nil, fault.New(fault.Validation, "a session binds at most %d secrets; it would bind %d", MaxPerSession, len(names)+len(operator))
	}
	out := make(map[string]string, len(names)+len(operator))
	envs := map[string]string{}
	add := func(name string) error {
		env := EnvName(name)
		if other, ok := envs[env]; ok {
			return fault.New(fault.Validation, "secrets %q and %q would both be %s; use one of them", other, name, env)
		}
		envs[env] = name
		ph, err := r.placeholder()
		if err != nil {
			return err
		}
		out[name] = ph
		return nil
	}
	for _, b := range operator {
		if err := add(b.Name); err != nil {
			return nil, err
		}
	}
	for _, name := range names {
		if err := CheckName(name); err != nil {
			return nil, err
		}
		if _, dup := out[name]; dup {
			if slices.ContainsFunc(operator, func(b providers.SecretBinding) bool { return b.Name == name }) {
				return nil, fault.New(fault.Validation, "secret %q is profile '%s''s own: every session of it has it already; leave it out of secrets", name, profileName)
			}
			return nil, fault.New(fault.Validation, "secret %q is named twice", name)
		}
		if owner == "" {
			return nil, fault.New(fault.Validation, "a shared session binds only its profile's secrets")
		}
		if !r.keys.Enabled() {
			return nil, NoKey()
		}
		if _, err := r.store.GetSecret(ctx, owner, name); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return nil, fault.New(fault.NotFound, "secret '%s' not found: a session binds only secrets you keep; set it first (PUT /v1/secrets/%s)", name, name)
			}
			return nil, err
		}
		if err := add(name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// placeholder is a fresh opaque token: PlaceholderPrefix and 32 base32 characters.
func (r *Room) placeholder() (string, error) {
	var b [20]byte
	if _, err := io.ReadFull(r.rand, b[:]); err != nil {
		return "", fmt.Errorf("secrets: reading a placeholder: %w", err)
	}
	return PlaceholderPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:])), nil
}

// Bindings are the secrets a session's sandbox is created, attached or restored with: for
// each of bound (name → placeholder, as the session keeps them), the value — the profile's
// own (operator) first, else owner's, opened only here — and its hosts. A principal's secret
// deleted since is left out (logged): its placeholder then reaches nobody. A session whose
// bound is empty needs no key.
//
// Errors: fault.Config when the gateway has no key or the value's key is gone; a value that
// does not open.
func (r *Room) Bindings(ctx context.Context, owner string, operator []providers.SecretBinding, bound map[string]string) ([]providers.SecretBinding, error) {
	if len(bound) == 0 {
		return nil, nil
	}
	names := make([]string, 0, len(bound))
	for n := range bound {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]providers.SecretBinding, 0, len(names))
	for _, name := range names {
		b := providers.SecretBinding{Name: name, EnvName: EnvName(name), Placeholder: bound[name]}
		if i := slices.IndexFunc(operator, func(o providers.SecretBinding) bool { return o.Name == name }); i >= 0 {
			b.Value, b.Hosts = slices.Clone(operator[i].Value), slices.Clone(operator[i].Hosts)
			out = append(out, b)
			continue
		}
		if owner == "" {
			continue
		}
		row, err := r.store.GetSecret(ctx, owner, name)
		if errors.Is(err, store.ErrNotFound) {
			r.log.Warn("a session's secret is gone; its sandbox gets no value for it", "secret", name)
			continue
		}
		if err != nil {
			return nil, err
		}
		v, err := r.keys.Open(row.KeyID, owner, name, row.Sealed)
		if err != nil {
			return nil, err
		}
		b.Value, b.Hosts = v, row.Hosts
		out = append(out, b)
	}
	return out, nil
}

// Env is the environment a session with bound secrets gives every execution: each secret's
// variable holding its placeholder (never a value).
func Env(bound map[string]string) map[string]string {
	if len(bound) == 0 {
		return nil
	}
	env := make(map[string]string, len(bound))
	for name, ph := range bound {
		env[EnvName(name)] = ph
	}
	return env
}

// Reseal re-seals every secret not sealed under the keyring's first key (a rotation's
// second step) and returns how many it re-sealed. Values are opened and sealed again one at
// a time; a secret set concurrently keeps its new value.
func (r *Room) Reseal(ctx context.Context) (int, error) {
	if !r.keys.Enabled() {
		return 0, NoKey()
	}
	primary, n := r.keys.Primary(), 0
	for {
		rows, err := r.store.SecretsSealedWithout(ctx, primary, 100)
		if err != nil || len(rows) == 0 {
			return n, err
		}
		progress := false
		for _, row := range rows {
			v, err := r.keys.Open(row.KeyID, row.OwnerID, row.Name, row.Sealed)
			if err != nil {
				return n, fmt.Errorf("re-sealing secret %q of principal %s: %w", row.Name, row.OwnerID, err)
			}
			keyID, sealed, err := r.keys.Seal(row.OwnerID, row.Name, v)
			clear(v)
			if err != nil {
				return n, err
			}
			ok, err := r.store.ResealSecret(ctx, row.OwnerID, row.Name, row.KeyID, keyID, sealed)
			if err != nil {
				return n, err
			}
			if ok {
				n++
			}
			progress = true
		}
		if !progress {
			return n, nil
		}
	}
}
