package park

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox/profile"
	"github.com/sandgate/sandgate/internal/store"
)

// Preview ports (docs/semantics.md §8 "Preview ports"): a TCP port inside a session's sandbox
// reached through the gateway — the provider's tunnel (sandboxd), never a port published on a
// host — by the session's owner with its bearer token, or by anyone holding a link: a token
// signed by the gateway, scoped to one session and port, that stops working when it expires,
// the session is destroyed, or its maker may no longer use the session — nor, for a link made
// with an API key, when that key is revoked, expires or is deleted.

// Share link lifetimes.
const (
	DefaultLinkTTL = time.Hour
	MaxLinkTTL     = 7 * 24 * time.Hour
	MinLinkTTL     = time.Minute
)

// linkKeyName names the share links' key among the store's signing keys.
const linkKeyName = "preview-links"

// PortTarget is a port of a session's sandbox that a caller may reach.
type PortTarget struct {
	SessionID string
	Port      int
	dial      func(ctx context.Context) (net.Conn, error)
}

// Dial opens a new connection to the port (a tunnel into the sandbox). The connection
// outlives ctx once returned; the caller closes it.
// Errors: fault.Conflict when nothing listens on the port; the provider's others.
func (t *PortTarget) Dial(ctx context.Context) (net.Conn, error) { return t.dial(ctx) }

// Port checks that p may reach port of session id's sandbox and returns it. It counts as a use
// of the session, wakes a paused one as any use does (or fault.Paused) and restores a parked
// one; it never makes a sandbox: nothing can listen in a sandbox that does not exist.
//
// Errors: fault.NotFound for an unknown or another principal's session; fault.Validation for
// a port outside 1–65535; fault.Conflict on per_call profiles or for a session without a
// sandbox; fault.Capability when the provider cannot reach ports (preview_ports); the checks
// every use of the profile makes (fault.Policy, fault.Forbidden).
func (pk *Room) Port(ctx context.Context, p principal.Principal, id, profName string, port int) (*PortTarget, error) {
	sess, prof, err := pk.portSession(ctx, p, id, profName, port)
	if err != nil {
		return nil, err
	}
	return pk.portTarget(ctx, p, prof, sess, port)
}

// portSession resolves session id for reaching one of its ports.
func (pk *Room) portSession(ctx context.Context, p principal.Principal, id, profName string, port int) (store.Session, *profile.Profile, error) {
	if port < 1 || port > providers.MaxPort {
		return store.Session{}, nil, fault.New(fault.Validation, "port %d is not a TCP port (1-%d)", port, providers.MaxPort)
	}
	sess, prof, ephemeral, err := pk.Resolve(ctx, p, id, profName)
	if err != nil {
		return store.Session{}, nil, err
	}
	if ephemeral {
		return store.Session{}, nil, fault.New(fault.Conflict, "profile '%s' has scope per_call: its sandboxes live for one run, so nothing in them can be previewed", prof.Name)
	}
	if !prof.Caps.PreviewPorts {
		return store.Session{}, nil, fault.Unsupported(prof.Provider.Type(), "preview_ports")
	}
	if _, err := pk.Profiles.Checks(prof, p); err != nil {
		return store.Session{}, nil, err
	}
	return sess, prof, nil
}

func (pk *Room) portTarget(ctx context.Context, p principal.Principal, prof *profile.Profile, sess store.Session, port int) (*PortTarget, error) {
	sess, err := pk.Ready(ctx, p, prof, sess)
	if err != nil {
		return nil, err
	}
	if sess.SandboxID == "" {
		return nil, fault.New(fault.Conflict, "sandbox session '%s' has no sandbox yet, so nothing listens on port %d; start a server in it first", sess.ID, port).
			WithHint("start a server as a background process (POST /v1/sessions/{id}/commands with \"background\": true)", "start a server in the session first")
	}
	_ = pk.Store.TouchSession(ctx, sess.ID, pk.Clock.Now())
	bound := store.Session{ID: sess.ID, SandboxID: sess.SandboxID}
	dial := func(ctx context.Context) (net.Conn, error) {
		// Each connection reaches the sandbox as it was bound when the target was made.
		sb, release, err := pk.Reach(ctx, p, prof, bound)
		if fault.KindOf(err) == fault.Gone {
			return nil, fault.New(fault.Conflict, "the sandbox of session '%s' no longer exists; nothing listens on port %d", sess.ID, port)
		}
		if err != nil {
			return nil, err
		}
		defer release()
		d, ok := sb.(providers.PortDialer)
		if !ok {
			return nil, fault.Unsupported(prof.Provider.Type(), "preview_ports")
		}
		conn, err := d.DialPort(ctx, port)
		if err != nil {
			return nil, classify(err, fault.Provision)
		}
		return conn, nil
	}
	return &PortTarget{SessionID: sess.ID, Port: port, dial: dial}, nil
}

// PersonalOpenWithin is how long after it was made a personal link may be opened (on the
// preview domain, where opening it signs a browser in to the preview until it expires).
const PersonalOpenWithin = time.Minute

// PortLink is a link's token and what it opens.
type PortLink struct {
	Token     string // URL-safe: base64url text, hyphens and dots
	SessionID string
	Port      int
	// Personal: a link its maker opens in their own browser (OpenBy applies), not one to share.
	Personal bool
	// PrincipalID is the store id of the principal that made the link: its access is checked
	// again on every use.
	PrincipalID string
	// APIKeyID is the API key the link was made with ("" for a sign-in): the link works only
	// while that key is live (checked again on every use), within the key's restrictions.
	APIKeyID  string
	ExpiresAt time.Time
	// OpenBy is when a personal link stops opening (ExpiresAt still bounds what it opened);
	// zero for a share link.
	OpenBy time.Time
}

// LinkOptions shape a link.
type LinkOptions struct {
	// TTL is how long the link works: 0 means DefaultLinkTTL; MinLinkTTL to MaxLinkTTL.
	TTL time.Duration
	// Personal makes a link for the caller's own browser: it must be opened within
	// PersonalOpenWithin (where the edge can tell, the preview domain).
	Personal bool
}

// CreatePortLink signs a link to port of session id: whoever holds its token reaches that
// port without a bearer token until it expires, the session is destroyed, or its maker (p)
// may no longer use the session (checked again on every use: PortByLink). Made with an API
// key (p.APIKeyID), it expires with the key at the latest and works only while the key is
// live — not revoked, not expired, not deleted — and within its profiles. The session needs
// no sandbox yet.
//
// Errors: Port's (but for a session without a sandbox); fault.Validation for a TTL out of
// range; fault.Policy for a user-identity profile, whose sandboxes are reached only as the
// caller.
func (pk *Room) CreatePortLink(ctx context.Context, p principal.Principal, id, profName string, port int, o LinkOptions) (PortLink, error) {
	ttl := o.TTL
	if ttl == 0 {
		ttl = DefaultLinkTTL
	}
	if ttl < MinLinkTTL || ttl > MaxLinkTTL {
		return PortLink{}, fault.New(fault.Validation, "a link lives %s to %s; %s is out of range", MinLinkTTL, MaxLinkTTL, ttl)
	}
	sess, prof, err := pk.portSession(ctx, p, id, profName, port)
	if err != nil {
		return PortLink{}, err
	}
	if prof.IdentityMode == profile.IdentityUser {
		return PortLink{}, fault.New(fault.Policy, "profile '%s' acts as the caller (identity mode user): its sandboxes are reached only with the caller's own token, never through a link", prof.Name)
	}
	if !validID(p.ID) {
		return PortLink{}, fault.New(fault.Internal, "the caller has no recorded principal id")
	}
	key, err := pk.linkKey(ctx)
	if err != nil {
		return PortLink{}, err
	}
	now := pk.Clock.Now()
	l := PortLink{SessionID: sess.ID, Port: port, Personal: o.Personal, PrincipalID: p.ID, ExpiresAt: now.Add(ttl).Truncate(time.Second)}
	if p.APIKeyID != "" {
		if !validID(p.APIKeyID) {
			return PortLink{}, fault.New(fault.Internal, "the caller's API key id '%s' cannot be named in a link", p.APIKeyID)
		}
		k, err := pk.liveKey(ctx, p.APIKeyID, p.ID)
		if fault.KindOf(err) == fault.NotFound {
			return PortLink{}, fault.New(fault.Forbidden, "the API key this request was made with was revoked or expired meanwhile; make the link with a live key or a sign-in")
		}
		if err != nil {
			return PortLink{}, err
		}
		l.APIKeyID = p.APIKeyID
		if k.ExpiresAt.Before(l.ExpiresAt) {
			l.ExpiresAt = k.ExpiresAt.Truncate(time.Second)
		}
	}
	if o.Personal {
		l.OpenBy = now.Add(PersonalOpenWithin).Truncate(time.Second)
		if l.OpenBy.After(l.ExpiresAt) {
			l.OpenBy = l.ExpiresAt
		}
	}
	l.Token = signLink(key, l)
	return l, nil
}

// VerifyLink checks a link's token — signed by this deployment, not expired — and returns
// what it names, without asking whether its maker may still use it (PortByLink does): what an
// edge needs to rate-limit or route the request before the checks that cost a round trip.
//
// Errors: fault.NotFound for a token that is malformed, not signed here or expired (one
// message for all: a link says nothing of why it fails); the store's errors reading the key.
func (pk *Room) VerifyLink(ctx context.Context, token string) (PortLink, error) {
	key, err := pk.linkKey(ctx)
	if err != nil {
		return PortLink{}, err
	}
	l, ok := verifyLink(key, token)
	if !ok || !pk.Clock.Now().Before(l.ExpiresAt) {
		return PortLink{}, linkGone()
	}
	return l, nil
}

func linkGone() error {
	return fault.New(fault.NotFound, "this preview link is unknown or has expired; ask for a new one")
}

// OpenLink checks a link being opened — VerifyLink's checks, a personal link's time to be
// opened (OpenBy), and the checks every use makes (PortByLink's) — without reaching the
// port: for an edge that trades the link for a credential of its own (the preview domain's
// cookie, which PortByLink then checks on every use).
//
// Errors: PortByLink's, but those of reaching the port; fault.NotFound for a personal link
// past its OpenBy.
func (pk *Room) OpenLink(ctx context.Context, token string) (PortLink, error) {
	l, _, _, _, err := pk.linkSession(ctx, token)
	if err != nil {
		return PortLink{}, err
	}
	if l.Personal && !pk.Clock.Now().Before(l.OpenBy) {
		return PortLink{}, fault.New(fault.NotFound, "this personal link had to be opened by %s; open the port again (console: Open port; API: POST /v1/sessions/{id}/ports/{port}/links with \"personal\": true)",
			l.OpenBy.UTC().Format(time.RFC3339))
	}
	return l, nil
}

// PortByLink opens the port a link's token names, for whoever holds it. Every use checks
// again that the link's maker may still use the session: the principal is still recorded,
// the session is still theirs (or shared with them, or they are an administrator), and the
// profile's allowed groups still include the groups of their latest token. A paused session
// is woken as any use wakes it (or fault.Paused).
//
// Errors: fault.NotFound for a token VerifyLink refuses, and for a link whose session is
// gone or whose maker lost access (the same message: a link says nothing of why it fails);
// Port's others.
func (pk *Room) PortByLink(ctx context.Context, token string) (*PortTarget, error) {
	l, sess, prof, maker, err := pk.linkSession(ctx, token)
	if err != nil {
		return nil, err
	}
	// The maker's token is not here: the provider acts as the gateway (agent mode only).
	return pk.portTarget(ctx, maker, prof, sess, l.Port)
}

// linkSession verifies token and checks that the link's maker may still use its session.
func (pk *Room) linkSession(ctx context.Context, token string) (PortLink, store.Session, *profile.Profile, principal.Principal, error) {
	fail := func(err error) (PortLink, store.Session, *profile.Profile, principal.Principal, error) {
		return PortLink{}, store.Session{}, nil, principal.Principal{}, err
	}
	l, err := pk.VerifyLink(ctx, token)
	if err != nil {
		return fail(err)
	}
	sess, err := pk.Store.GetSession(ctx, l.SessionID)
	if err != nil {
		if fault.KindOf(sessionErr(err, l.SessionID)) == fault.NotFound {
			return fail(linkGone())
		}
		return fail(err)
	}
	prof, ok := pk.Profiles.Lookup(sess.Profile)
	if !ok || !prof.Caps.PreviewPorts || prof.IdentityMode == profile.IdentityUser || prof.Scope == profile.ScopePerCall || sess.Status == store.SessionClosed {
		return fail(linkGone()) // a session being destroyed serves nothing more
	}
	// The maker as its latest token described it; no longer recorded: the link is gone.
	maker, err := pk.Account.Principal(ctx, l.PrincipalID)
	if errors.Is(err, store.ErrNotFound) {
		return fail(linkGone())
	}
	if err != nil {
		return fail(err)
	}
	if l.APIKeyID != "" {
		// Made with a key: the key must still be live, and its restrictions hold.
		k, err := pk.liveKey(ctx, l.APIKeyID, l.PrincipalID)
		if fault.KindOf(err) == fault.NotFound {
			return fail(linkGone())
		}
		if err != nil {
			return fail(err)
		}
		maker.APIKeyID, maker.KeyProfiles = k.ID, k.Profiles
	}
	if !pk.Visible(maker, sess) || !profile.Allowed(maker, prof) {
		return fail(linkGone())
	}
	if _, err := pk.Profiles.Checks(prof, maker); err != nil {
		return fail(err)
	}
	return l, sess, prof, maker, nil
}

// liveKey reads API key id of principal principalID and checks that it is live: neither
// revoked nor expired. Errors: fault.NotFound when it is not (or is gone, or another
// principal's); the store's.
func (pk *Room) liveKey(ctx context.Context, id, principalID string) (store.APIKey, error) {
	k, err := pk.Store.GetAPIKey(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return store.APIKey{}, fault.New(fault.NotFound, "API key '%s' no longer exists", id)
	case err != nil:
		return store.APIKey{}, err
	case k.PrincipalID != principalID || k.RevokedAt != nil || !pk.Clock.Now().Before(k.ExpiresAt):
		return store.APIKey{}, fault.New(fault.NotFound, "API key '%s' is no longer live", id)
	}
	return k, nil
}

// PortSession checks that p may reach port of session id (Port's checks) and returns the
// session's id — "default" resolved — without touching the session or its sandbox: for an
// edge that sends the caller to where the port is served.
//
// Errors: Port's, but for a session without a sandbox.
func (pk *Room) PortSession(ctx context.Context, p principal.Principal, id, profName string, port int) (string, error) {
	sess, _, err := pk.portSession(ctx, p, id, profName, port)
	if err != nil {
		return "", err
	}
	return sess.ID, nil
}

// linkKey returns the share links' key, shared by every replica through the store.
func (pk *Room) linkKey(ctx context.Context) ([]byte, error) {
	pk.linkKeyMu.Lock()
	defer pk.linkKeyMu.Unlock()
	if pk.linkKeyVal != nil {
		return pk.linkKeyVal, nil
	}
	candidate := make([]byte, 32)
	if _, err := rand.Read(candidate); err != nil {
		return nil, err
	}
	key, err := pk.Store.SigningKey(ctx, linkKeyName, candidate, pk.Clock.Now())
	if err != nil {
		return nil, err
	}
	if len(key) < 32 {
		return nil, fault.New(fault.Internal, "the share-link key in the store is too short")
	}
	pk.linkKeyVal = key
	return key, nil
}

// A link token is "v3.<kind>.<session id>.<port>.<maker's principal id>.<API key id>.
// <expiry>.<open-by>.<nonce>.<base64url HMAC-SHA256 of the rest>", kind "s" (share) or "p"
// (personal), the key id empty for a link made with a sign-in, times in unix seconds
// (open-by 0 for a share link), the nonce 96 random bits in base64url (two links made alike
// are still two links, each with its own rate): readable, so that a log or a browser's
// address bar says what it opens. Earlier versions are no longer accepted: version 1 did not
// name the maker, version 2 not the key, so its links outlived their key's revocation.
const linkVersion = "v3"

const (
	kindShare    = "s"
	kindPersonal = "p"
)

func signLink(key []byte, l PortLink) string {
	kind, openBy := kindShare, int64(0)
	if l.Personal {
		kind, openBy = kindPersonal, l.OpenBy.Unix()
	}
	var nonce [12]byte
	_, _ = rand.Read(nonce[:]) // never fails (crypto/rand)
	body := strings.Join([]string{linkVersion, kind, l.SessionID, strconv.Itoa(l.Port), l.PrincipalID, l.APIKeyID,
		strconv.FormatInt(l.ExpiresAt.Unix(), 10), strconv.FormatInt(openBy, 10), base64.RawURLEncoding.EncodeToString(nonce[:])}, ".")
	return body + "." + base64.RawURLEncoding.EncodeToString(linkMAC(key, body))
}

func linkMAC(key []byte, body string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("sandgate preview link\x00" + body))
	return m.Sum(nil)
}

// verifyLink checks token's signature and returns what it names; ok is false for anything
// but a well-formed token this key signed.
func verifyLink(key []byte, token string) (l PortLink, ok bool) {
	if len(token) > 512 {
		return PortLink{}, false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 10 || parts[0] != linkVersion {
		return PortLink{}, false
	}
	mac, err := base64.RawURLEncoding.DecodeString(parts[9])
	if err != nil || !hmac.Equal(mac, linkMAC(key, strings.Join(parts[:9], "."))) {
		return PortLink{}, false
	}
	port, err := strconv.Atoi(parts[3])
	if err != nil || port < 1 || port > providers.MaxPort {
		return PortLink{}, false
	}
	exp, err1 := strconv.ParseInt(parts[6], 10, 64)
	openBy, err2 := strconv.ParseInt(parts[7], 10, 64)
	if err1 != nil || err2 != nil || !validID(parts[4]) || parts[5] != "" && !validID(parts[5]) {
		return PortLink{}, false
	}
	l = PortLink{Token: token, SessionID: parts[2], Port: port, PrincipalID: parts[4], APIKeyID: parts[5], ExpiresAt: time.Unix(exp, 0)}
	switch parts[1] {
	case kindShare:
	case kindPersonal:
		l.Personal, l.OpenBy = true, time.Unix(openBy, 0)
	default:
		return PortLink{}, false
	}
	return l, true
}

// validID: a store id as text (a uuid, or hex digits: hex digits and hyphens), never holding
// a dot.
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == '-') {
			return false
		}
	}
	return true
}

// String describes the target for logs.
func (t *PortTarget) String() string {
	return fmt.Sprintf("port %d of session %s", t.Port, t.SessionID)
}
