package sandbox

import (
	"context"
	"errors"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox/park"
	"github.com/sandgate/sandgate/internal/store"
)

// The park room (internal/sandbox/park) owns pause and resume, idle parking, session
// lifetimes, snapshots and preview ports with their links; the domain's API keeps speaking of
// them under its own names and delegates to it. It reaches sessions and sandboxes through
// the functions parkOptions hands it.

// What ends a session whose lifetime passed (CreateSessionInput.OnExpiry, Session.OnExpiry).
const (
	ExpireDestroy = store.ExpireDestroy
	ExpirePause   = store.ExpirePause
)

// MaxLifetime bounds a session's lifetime: 30 days (park.MaxLifetime).
const MaxLifetime = park.MaxLifetime

// Share link lifetimes (park.DefaultLinkTTL and its kin).
const (
	DefaultLinkTTL     = park.DefaultLinkTTL
	MaxLinkTTL         = park.MaxLinkTTL
	MinLinkTTL         = park.MinLinkTTL
	PersonalOpenWithin = park.PersonalOpenWithin
)

// Snapshots and preview ports as the edges see them (the park room's types).
type (
	Snapshot       = park.Snapshot
	SnapshotFilter = park.SnapshotFilter
	PortTarget     = park.PortTarget
	PortLink       = park.PortLink
	LinkOptions    = park.LinkOptions
)

// parkOptions are the park room's over s's store and rooms, with the lease and the session
// paths it needs as functions, and newID for the ids it makes (composition: New builds the
// room with them).
func parkOptions(s *Service, newID func() string) park.Options {
	return park.Options{
		Store: s.store, Profiles: s.profiles, Quota: s.quota, Account: s.account, Clock: s.clock, NewID: newID, Log: s.log,
		Policy: s.sessionPolicy, Resolve: s.sessions.Resolve, Visible: s.sessions.Visible, LockSession: s.sessions.Lock, DestroyBackend: s.sessions.DestroyBackend,
		Hold: func(ctx context.Context, p principal.Principal, prof *Profile, sess store.Session) (store.Session, func(), error) {
			l, err := s.leases().lease(ctx, p, prof, sess, leaseOpts{order: orderLock, reach: reachNone, noWake: true})
			if errors.As(err, new(orderErr)) && fault.KindOf(err) == fault.NotFound {
				return store.Session{}, nil, store.ErrNotFound // destroyed meanwhile
			}
			if err != nil {
				return store.Session{}, nil, err
			}
			return l.Session, l.Release, nil
		},
		Ready: func(ctx context.Context, p principal.Principal, prof *Profile, sess store.Session) (store.Session, error) {
			l, err := s.leases().lease(ctx, p, prof, sess, leaseOpts{order: orderIfParked, reach: reachNone})
			if err != nil {
				return store.Session{}, err
			}
			return l.Session, nil
		},
		Reach: func(ctx context.Context, p principal.Principal, prof *Profile, sess store.Session) (providers.Sandbox, func(), error) {
			l, err := s.leases().lease(ctx, p, prof, sess, leaseOpts{order: orderNone, reach: reachAttach})
			if err != nil {
				return nil, nil, err
			}
			return l.Sandbox, l.Release, nil
		},
		Expire: func(ctx context.Context, owner principal.Principal, prof *Profile, sess store.Session) (bool, string, error) {
			out, err := s.sessions.ExpireDestroy(ctx, owner, prof, sess)
			return out.Pending, out.Notice, err
		},
	}
}

// PauseSession freezes session id's sandbox in place (park.Room.PauseSession, which lists
// the errors) and returns the session and the warnings of a non-strict profile whose
// provider cannot pause.
func (s *Service) PauseSession(ctx context.Context, p principal.Principal, id, profile string) (Session, []string, error) {
	sess, warnings, err := s.park.PauseSession(ctx, p, id, profile)
	if err != nil {
		return Session{}, nil, err
	}
	return view(sess), warnings, nil
}

// ResumeSession thaws session id's paused sandbox (park.Room.ResumeSession).
func (s *Service) ResumeSession(ctx context.Context, p principal.Principal, id, profile string) (Session, error) {
	sess, err := s.park.ResumeSession(ctx, p, id, profile)
	if err != nil {
		return Session{}, err
	}
	return view(sess), nil
}

// SetSessionLifetime makes session id end lifetime from now, or clears it with 0
// (park.Room.SetSessionLifetime, which lists the errors).
func (s *Service) SetSessionLifetime(ctx context.Context, p principal.Principal, id, profile string, lifetime time.Duration, extendOnly bool) (Session, error) {
	sess, err := s.park.SetSessionLifetime(ctx, p, id, profile, lifetime, extendOnly)
	if err != nil {
		return Session{}, err
	}
	return view(sess), nil
}

// CreateSnapshot captures session id's sandbox as a snapshot named name
// (park.Room.CreateSnapshot, which lists the errors).
func (s *Service) CreateSnapshot(ctx context.Context, p principal.Principal, id, profile, name string) (Snapshot, error) {
	return s.park.CreateSnapshot(ctx, p, id, profile, name)
}

// ListSnapshots returns a page of p's snapshots and the cursor of the next page.
func (s *Service) ListSnapshots(ctx context.Context, p principal.Principal, f SnapshotFilter) ([]Snapshot, string, error) {
	return s.park.ListSnapshots(ctx, p, f)
}

// GetSnapshot returns snapshot id (fault.NotFound for an unknown or another principal's).
func (s *Service) GetSnapshot(ctx context.Context, p principal.Principal, id string) (Snapshot, error) {
	return s.park.GetSnapshot(ctx, p, id)
}

// DeleteSnapshot deletes snapshot id and its capture (park.Room.DeleteSnapshot).
func (s *Service) DeleteSnapshot(ctx context.Context, p principal.Principal, id string) error {
	return s.park.DeleteSnapshot(ctx, p, id)
}

// Port checks that p may reach port of session id's sandbox and returns it (park.Room.Port,
// which lists the errors).
func (s *Service) Port(ctx context.Context, p principal.Principal, id, profile string, port int) (*PortTarget, error) {
	return s.park.Port(ctx, p, id, profile, port)
}

// PortSession checks that p may reach port of session id and returns the session's id
// without touching it (park.Room.PortSession).
func (s *Service) PortSession(ctx context.Context, p principal.Principal, id, profile string, port int) (string, error) {
	return s.park.PortSession(ctx, p, id, profile, port)
}

// CreatePortLink signs a link to port of session id (park.Room.CreatePortLink).
func (s *Service) CreatePortLink(ctx context.Context, p principal.Principal, id, profile string, port int, o LinkOptions) (PortLink, error) {
	return s.park.CreatePortLink(ctx, p, id, profile, port, o)
}

// VerifyLink checks a link's token and returns what it names (park.Room.VerifyLink).
func (s *Service) VerifyLink(ctx context.Context, token string) (PortLink, error) {
	return s.park.VerifyLink(ctx, token)
}

// OpenLink checks a link being opened without reaching the port (park.Room.OpenLink).
func (s *Service) OpenLink(ctx context.Context, token string) (PortLink, error) {
	return s.park.OpenLink(ctx, token)
}

// PortByLink opens the port a link's token names, for whoever holds it (park.Room.PortByLink).
func (s *Service) PortByLink(ctx context.Context, token string) (*PortTarget, error) {
	return s.park.PortByLink(ctx, token)
}

// sessionErr maps a store error about session id (park.SessionErr).
func sessionErr(err error, id string) error { return park.SessionErr(err, id) }

// pausedErr is the refusal of work in paused session id (park.PausedErr).
func pausedErr(id string) error { return park.PausedErr(id) }

// idleNotice is the notice of an idle reset of session id (park.IdleNotice).
func idleNotice(prof *Profile, id string) string { return park.IdleNotice(prof, id) }

// idleAction is what the idle sweeper does with prof's idle sessions.
func idleAction(prof *Profile) string { return prof.EffectiveIdleAction() }
