package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store"
)

// Session lifetimes (docs/semantics.md §8 "Lifetime"): a session made with a lifetime ends
// when it passes — destroyed like DELETE does, or, with ExpirePause, paused (its sandbox
// frozen, its lifetime cleared: resuming it gives it a new one). The sweeper ends them
// (sweepExpired) on its frequent pass, every lost_after/2 (15 s by default); until then they
// work as any session. The idle policy of their profile still applies meanwhile.

// What ends a session whose lifetime passed (CreateSessionInput.OnExpiry, Session.OnExpiry).
const (
	ExpireDestroy = store.ExpireDestroy
	ExpirePause   = store.ExpirePause
)

// MaxLifetime bounds a session's lifetime: 30 days.
const MaxLifetime = 30 * 24 * time.Hour

// checkLifetime refuses a lifetime outside 1 s to MaxLifetime (0: none) or an unknown
// OnExpiry, and a pause that prof cannot do (as PauseSession would refuse it).
func (s *Service) checkLifetime(p principal.Principal, prof *Profile, lifetime time.Duration, onExpiry string) error {
	if lifetime < 0 || lifetime > 0 && lifetime < time.Second || lifetime > MaxLifetime {
		return fault.New(fault.Validation, "a session's lifetime must be from 1 s to %s, not %s", MaxLifetime, lifetime)
	}
	switch onExpiry {
	case "", ExpireDestroy:
	case ExpirePause:
		if err := s.parkable(p, prof, "", false, "pause"); err != nil {
			return err
		}
	default:
		return fault.New(fault.Validation, "on_expiry must be '%s' or '%s', not '%s'", ExpireDestroy, ExpirePause, onExpiry)
	}
	return nil
}

// SetSessionLifetime makes session id end lifetime from now (ExpiresAt), keeping what ends
// it; with extendOnly a later end it already has is kept. A lifetime of 0 clears it (the
// session lives until it is destroyed). It returns the session as it then stands.
//
// Errors: fault.Validation for a lifetime outside 0 or 1 s to MaxLifetime; those of
// GetSession (fault.NotFound for an unknown or another principal's session); fault.Conflict
// for a per_call profile's or the default session (they have no lifetime) and for a session
// being destroyed; fault.Forbidden for the shared session of a per_runtime profile but for
// admins.
func (s *Service) SetSessionLifetime(ctx context.Context, p principal.Principal, id, profile string, lifetime time.Duration, extendOnly bool) (Session, error) {
	if lifetime < 0 || lifetime > 0 && lifetime < time.Second || lifetime > MaxLifetime {
		return Session{}, fault.New(fault.Validation, "a session's lifetime must be from 1 s to %s, or 0 for none, not %s", MaxLifetime, lifetime)
	}
	if isDefault(id) {
		return Session{}, fault.New(fault.Conflict, "a default session has no lifetime; create a session with one")
	}
	sess, prof, ephemeral, err := s.resolve(ctx, p, id, profile)
	if err != nil {
		return Session{}, err
	}
	if ephemeral {
		return Session{}, fault.New(fault.Conflict, "profile '%s' has scope per_call and keeps no sessions", prof.Name)
	}
	if sess.OwnerID == "" && !p.Admin {
		return Session{}, fault.New(fault.Forbidden, "sandbox session '%s' is the one session of per_runtime profile '%s', shared by every caller; only an administrator may set its lifetime", sess.ID, prof.Name)
	}
	var at time.Time
	if lifetime > 0 {
		at = s.now().Add(lifetime)
	}
	if extendOnly && (at.IsZero() || !sess.ExpiresAt.IsZero() && sess.ExpiresAt.After(at)) {
		return view(sess), nil
	}
	if err := s.store.SetSessionExpiry(ctx, sess.ID, at, ""); err != nil {
		return Session{}, s.sessionErr(err, id)
	}
	sess.ExpiresAt = at
	return view(sess), nil
}

// sweepExpired ends the sessions whose lifetime passed: destroyed, or paused (ExpirePause;
// a session with a running execution is paused once it ended, at a later sweep). Failures are
// logged; the next sweep tries again.
func (s *Service) sweepExpired(ctx context.Context) {
	rows, err := s.store.ExpiredSessions(ctx, s.now(), 100)
	if err != nil {
		s.log.Warn("listing the sessions whose lifetime ended failed", "err", err)
		return
	}
	for _, sess := range rows {
		if ctx.Err() != nil {
			return
		}
		prof := s.profiles.Get(sess.Profile)
		log := s.log.With("session_id", sess.ID, "profile", sess.Profile, "expired_at", sess.ExpiresAt)
		if prof == nil {
			log.Warn("a session's lifetime ended, but its profile is not configured on this gateway: it is left as it is")
			continue
		}
		owner, err := s.ownerOf(ctx, sess)
		if err != nil {
			log.Warn("reading the owner of a session whose lifetime ended failed", "err", err)
			continue
		}
		if sess.OnExpiry == ExpirePause {
			if err := s.expirePause(ctx, prof, sess); err != nil {
				log.Warn("pausing a session whose lifetime ended failed", "err", err)
			}
			continue
		}
		out, err := s.expireDestroy(ctx, owner, prof, sess)
		switch {
		case err != nil:
			log.Warn("destroying a session whose lifetime ended failed", "err", err)
		case out.Pending:
			log.Warn("a session's lifetime ended; removing its sandbox failed and is retried", "notice", out.Notice)
		default:
			log.Info("session destroyed: its lifetime ended")
		}
	}
}

// ownerOf is the principal that owns sess as last recorded (the zero principal for a shared
// session), for the provider calls made on its behalf.
func (s *Service) ownerOf(ctx context.Context, sess store.Session) (principal.Principal, error) {
	if sess.OwnerID == "" {
		return principal.Principal{}, nil
	}
	return s.account.Principal(ctx, sess.OwnerID)
}

// expireDestroy destroys session sess, whose lifetime passed, as DestroySession does for its
// owner: its work is cancelled, its sandbox removed (or its removal retried), the row
// forgotten, and the destruction audited as its owner's.
func (s *Service) expireDestroy(ctx context.Context, owner principal.Principal, prof *Profile, sess store.Session) (Destroyed, error) {
	if !sess.PausedAt.IsZero() {
		if _, err := s.thaw(ctx, prof, &sess); err != nil {
			s.log.Warn("resuming a paused sandbox before destroying it failed", "session_id", sess.ID, "err", err)
		}
	}
	if ids, err := s.store.UnfinishedTasks(ctx, sess.ID); err == nil {
		for _, id := range ids {
			_ = s.cancelTask(ctx, owner, id, "the session's lifetime ended")
		}
	}
	unlock, err := s.lockSession(ctx, sess.ID)
	if err != nil {
		return Destroyed{}, err
	}
	defer unlock()
	cur, err := s.store.GetSession(ctx, sess.ID)
	if errors.Is(err, store.ErrNotFound) {
		return Destroyed{SessionID: sess.ID}, nil // destroyed meanwhile
	}
	if err != nil {
		return Destroyed{}, err
	}
	if cur.ExpiresAt.IsZero() || cur.ExpiresAt.After(s.now()) || cur.Status == store.SessionClosed {
		return Destroyed{SessionID: sess.ID}, nil // given more time meanwhile
	}
	out, err := s.finishDestroy(ctx, prof, cur)
	if err != nil {
		return Destroyed{}, err
	}
	event := store.AuditEvent{Kind: store.AuditSessionDestroy, SessionID: cur.ID, Profile: cur.Profile}
	if out.Pending {
		event.Status, event.ErrorType = "failed", string(out.failure)
	}
	if owner.ID != "" {
		s.account.Record(ctx, owner, event)
	}
	return out, nil
}

// expirePause pauses session sess, whose lifetime passed, and clears its lifetime. A session
// running an execution is left for a later sweep; one without a sandbox has nothing to pause
// (its lifetime is cleared). A profile whose provider cannot pause holds the session
// (non-strict profiles, as PauseSession does).
func (s *Service) expirePause(ctx context.Context, prof *Profile, sess store.Session) error {
	if err := s.refuseIfRunning(ctx, sess.ID, "pause"); err != nil {
		return nil // paused once the execution ended
	}
	unlock, err := s.lockFor(ctx, sess.ID, "pause")
	if err != nil {
		return err
	}
	defer unlock()
	cur, err := s.store.GetSession(ctx, sess.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if cur.ExpiresAt.IsZero() || cur.ExpiresAt.After(s.now()) || cur.Status == store.SessionClosed {
		return nil
	}
	if cur.SandboxID != "" && cur.PausedAt.IsZero() {
		if prof.Caps.Pause {
			if err := prof.Provider.(providers.Pauser).Pause(ctx, cur.SandboxID); err != nil && fault.KindOf(err) != fault.Gone {
				return classify(err, fault.Provision)
			}
		}
		notice := fmt.Sprintf("sandbox session '%s' was paused when its lifetime ended and has been resumed: its files, running processes and code-context variables were kept", cur.ID)
		if _, err := s.store.PauseSession(ctx, cur.ID, cur.SandboxID, s.now(), false, notice); err != nil {
			return err
		}
	}
	if err := s.store.SetSessionExpiry(ctx, cur.ID, time.Time{}, ""); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	s.log.Info("session paused: its lifetime ended", "session_id", cur.ID, "profile", prof.Name)
	return nil
}
