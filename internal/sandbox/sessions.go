package sandbox

import (
	"context"

	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox/session"
	"github.com/sandgate/sandgate/internal/store"
)

// The session room (internal/sandbox/session) owns a session's life as its caller sees it —
// made, found (by id or as the default), listed, destroyed — and the identities an execution
// resolves without a round trip; the domain's API keeps speaking of them under its own names.

// DefaultSessionID addresses the caller's default session of a profile (seed: the omitted
// id, `default:<profile>`), created on first use.
const DefaultSessionID = session.DefaultSessionID

// Session states (Session.State; docs/semantics.md §8).
const (
	StateNone          = session.StateNone
	StateRunning       = session.StateRunning
	StatePaused        = session.StatePaused
	StateParked        = session.StateParked
	StateDestroyFailed = session.StateDestroyFailed
)

// Sessions as the edges see them (the session room's types).
type (
	Session            = session.Session
	CreateSessionInput = session.CreateSessionInput
	ListFilter         = session.ListFilter
	Destroyed          = session.Destroyed
)

// CreateSession mints a new session on a per_session profile (session.Room.CreateSession,
// which lists the errors).
func (s *Service) CreateSession(ctx context.Context, p principal.Principal, in CreateSessionInput) (Session, error) {
	return s.sessions.CreateSession(ctx, p, in)
}

// GetSession returns one session, also one being destroyed; DefaultSessionID creates the
// default session on first use (session.Room.GetSession).
func (s *Service) GetSession(ctx context.Context, p principal.Principal, id, profile string) (Session, error) {
	return s.sessions.GetSession(ctx, p, id, profile)
}

// ListSessions returns a page of p's sessions (all sessions for an admin with All) and the
// cursor of the next page (session.Room.ListSessions).
func (s *Service) ListSessions(ctx context.Context, p principal.Principal, f ListFilter) ([]Session, string, error) {
	return s.sessions.ListSessions(ctx, p, f)
}

// DestroySession destroys session id: its work cancelled, its sandbox removed (or its removal
// retried in the background), the session forgotten (session.Room.DestroySession).
func (s *Service) DestroySession(ctx context.Context, p principal.Principal, id, profile string) (Destroyed, error) {
	return s.sessions.DestroySession(ctx, p, id, profile)
}

// view is the session row as the caller sees it (session.View).
func view(row store.Session) Session { return session.View(row) }

// closedErr is the refusal of work in closed session sess (session.ClosedErr).
func closedErr(sess store.Session) error { return session.ClosedErr(sess) }
