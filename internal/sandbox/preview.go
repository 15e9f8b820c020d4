package sandbox

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store"
)

// Preview ports (docs/semantics.md §8 "Preview ports"): a TCP port inside a session's sandbox
// reached through the gateway — the provider's tunnel (sandboxd), never a port published on a
// host — by the session's owner with its bearer token, or by anyone holding a share link: a
// token signed by the gateway, scoped to one session and port, that stops working when it
// expires or the session is destroyed.

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
func (s *Service) Port(ctx context.Context, p principal.Principal, id, profile string, port int) (*PortTarget, error) {
	sess, prof, err := s.portSession(ctx, p, id, profile, port)
	if err != nil {
		return nil, err
	}
	return s.portTarget(ctx, p, prof, sess, port)
}

// portSession resolves session id for reaching one of its ports.
func (s *Service) portSession(ctx context.Context, p principal.Principal, id, profile string, port int) (store.Session, *Profile, error) {
	if port < 1 || port > providers.MaxPort {
		return store.Session{}, nil, fault.New(fault.Validation, "port %d is not a TCP port (1-%d)", port, providers.MaxPort)
	}
	sess, prof, ephemeral, err := s.resolve(ctx, p, id, profile)
	if err != nil {
		return store.Session{}, nil, err
	}
	if ephemeral {
		return store.Session{}, nil, fault.New(fault.Conflict, "profile '%s' has scope per_call: its sandboxes live for one run, so nothing in them can be previewed", prof.Name)
	}
	if !prof.Caps.PreviewPorts {
		return store.Session{}, nil, fault.Unsupported(prof.Provider.Type(), "preview_ports")
	}
	if _, err := s.checks(prof, p); err != nil {
		return store.Session{}, nil, err
	}
	return sess, prof, nil
}

func (s *Service) portTarget(ctx context.Context, p principal.Principal, prof *Profile, sess store.Session, port int) (*PortTarget, error) {
	sess, err := s.usable(ctx, p, prof, sess)
	if err != nil {
		return nil, err
	}
	if sess.SandboxID == "" {
		return nil, fault.New(fault.Conflict, "sandbox session '%s' has no sandbox yet, so nothing listens on port %d; start a server in it first", sess.ID, port).
			WithHint("start a server as a background process (POST /v1/sessions/{id}/commands with \"background\": true)", "start a server in the session first")
	}
	_ = s.store.TouchSession(ctx, sess.ID, s.now())
	pp, sandboxID := providerPrincipal(prof, p), sess.SandboxID
	dial := func(ctx context.Context) (net.Conn, error) {
		sb, err := prof.Provider.Attach(ctx, sandboxID, pp, prof.Policy)
		if fault.KindOf(err) == fault.Gone {
			return nil, fault.New(fault.Conflict, "the sandbox of session '%s' no longer exists; nothing listens on port %d", sess.ID, port)
		}
		if err != nil {
			return nil, classify(err, fault.Provision)
		}
		defer func() { _ = sb.Close() }()
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

// PortLink is a share link's token and what it opens.
type PortLink struct {
	Token     string // URL-safe: base64url text and dots
	SessionID string
	Port      int
	ExpiresAt time.Time
}

// CreatePortLink signs a share link to port of session id, valid for ttl (0: DefaultLinkTTL;
// MinLinkTTL to MaxLinkTTL): whoever holds its token reaches that port without a bearer token
// until it expires or the session is destroyed. The session needs no sandbox yet.
//
// Errors: Port's (but for a session without a sandbox); fault.Validation for a ttl out of
// range; fault.Policy for a user-identity profile, whose sandboxes are reached only as the
// caller.
func (s *Service) CreatePortLink(ctx context.Context, p principal.Principal, id, profile string, port int, ttl time.Duration) (PortLink, error) {
	if ttl == 0 {
		ttl = DefaultLinkTTL
	}
	if ttl < MinLinkTTL || ttl > MaxLinkTTL {
		return PortLink{}, fault.New(fault.Validation, "a share link lives %s to %s; %s is out of range", MinLinkTTL, MaxLinkTTL, ttl)
	}
	sess, prof, err := s.portSession(ctx, p, id, profile, port)
	if err != nil {
		return PortLink{}, err
	}
	if prof.IdentityMode == IdentityUser {
		return PortLink{}, fault.New(fault.Policy, "profile '%s' acts as the caller (identity mode user): its sandboxes are reached only with the caller's own token, never through a share link", prof.Name)
	}
	key, err := s.linkKey(ctx)
	if err != nil {
		return PortLink{}, err
	}
	exp := s.now().Add(ttl).Truncate(time.Second)
	return PortLink{Token: signLink(key, sess.ID, port, exp), SessionID: sess.ID, Port: port, ExpiresAt: exp}, nil
}

// PortByLink opens the port a share link's token names, for whoever holds it: the session's
// owner made it. A paused session is woken as any use wakes it (or fault.Paused).
//
// Errors: fault.NotFound for a token that is malformed, not signed by this deployment,
// expired, or whose session is gone (one message for all: a link says nothing of why it
// fails); Port's others.
func (s *Service) PortByLink(ctx context.Context, token string) (*PortTarget, error) {
	key, err := s.linkKey(ctx)
	if err != nil {
		return nil, err
	}
	gone := fault.New(fault.NotFound, "this preview link is unknown or has expired; ask for a new one")
	sid, port, exp, ok := verifyLink(key, token)
	if !ok || !s.now().Before(exp) {
		return nil, gone
	}
	sess, err := s.store.GetSession(ctx, sid)
	if err != nil {
		if fault.KindOf(s.sessionErr(err, sid)) == fault.NotFound {
			return nil, gone
		}
		return nil, err
	}
	prof, ok := s.profiles[sess.Profile]
	if !ok || !prof.Caps.PreviewPorts || prof.IdentityMode == IdentityUser || prof.Scope == ScopePerCall || sess.Status == store.SessionClosed {
		return nil, gone // a session being destroyed serves nothing more
	}
	// The owner's token is not here: the provider acts as the gateway (agent mode only).
	return s.portTarget(ctx, principal.Principal{}, prof, sess, port)
}

// linkKey returns the share links' key, shared by every replica through the store.
func (s *Service) linkKey(ctx context.Context) ([]byte, error) {
	s.linkKeyMu.Lock()
	defer s.linkKeyMu.Unlock()
	if s.linkKeyVal != nil {
		return s.linkKeyVal, nil
	}
	candidate := make([]byte, 32)
	if _, err := rand.Read(candidate); err != nil {
		return nil, err
	}
	key, err := s.store.SigningKey(ctx, linkKeyName, candidate, s.now())
	if err != nil {
		return nil, err
	}
	if len(key) < 32 {
		return nil, fault.New(fault.Internal, "the share-link key in the store is too short")
	}
	s.linkKeyVal = key
	return key, nil
}

// linkKeyCache holds the share links' key once read (Service embeds it).
type linkKeyCache struct {
	linkKeyMu  sync.Mutex
	linkKeyVal []byte
}

// A link token is "v1.<session id>.<port>.<expiry, unix seconds>.<base64url HMAC-SHA256 of
// the rest>": readable, so that a log or a browser's address bar says what it opens.
const linkVersion = "v1"

func signLink(key []byte, sessionID string, port int, exp time.Time) string {
	body := strings.Join([]string{linkVersion, sessionID, strconv.Itoa(port), strconv.FormatInt(exp.Unix(), 10)}, ".")
	return body + "." + base64.RawURLEncoding.EncodeToString(linkMAC(key, body))
}

func linkMAC(key []byte, body string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("sandgate preview link\x00" + body))
	return m.Sum(nil)
}

// verifyLink checks token's signature and returns what it names; ok is false for anything
// but a well-formed token this key signed.
func verifyLink(key []byte, token string) (sessionID string, port int, exp time.Time, ok bool) {
	if len(token) > 512 {
		return "", 0, time.Time{}, false
	}
	parts := strings.Split(token, ".")
	if len(parts) != 5 || parts[0] != linkVersion {
		return "", 0, time.Time{}, false
	}
	mac, err := base64.RawURLEncoding.DecodeString(parts[4])
	if err != nil || !hmac.Equal(mac, linkMAC(key, strings.Join(parts[:4], "."))) {
		return "", 0, time.Time{}, false
	}
	port, err = strconv.Atoi(parts[2])
	if err != nil || port < 1 || port > providers.MaxPort {
		return "", 0, time.Time{}, false
	}
	secs, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil {
		return "", 0, time.Time{}, false
	}
	return parts[1], port, time.Unix(secs, 0), true
}

// String describes the target for logs.
func (t *PortTarget) String() string {
	return fmt.Sprintf("port %d of session %s", t.Port, t.SessionID)
}
