package park

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox/profile"
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

// CheckLifetime refuses a lifetime outside 1 s to MaxLifetime (0: none) or an unknown
// OnExpiry, and a pause that prof cannot do (as PauseSession would refuse it).
func (pk *Room) CheckLifetime(p principal.Principal, prof *profile.Profile, lifetime time.Duration, onExpiry string) error {
	if lifetime < 0 || lifetime > 0 && lifetime < time.Second || lifetime > MaxLifetime {
		return fault.New(fault.Validation, "a session's lifetime must be from 1 s to %s, not %s", MaxLifetime, lifetime)
	}
	switch onExpiry {
	case "", ExpireDestroy:
	case ExpirePause:
		if err := pk.parkable(p, prof, "", false, "pause"); err != nil {
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
func (pk *Room) SetSessionLifetime(ctx context.Context, p principal.Principal, id, profName string, lifetime time.Duration, extendOnly bool) (store.Session, error) {
	if lifetime < 0 || lifetime > 0 && lifetime < time.Second || lifetime > MaxLifetime {
		return store.Session{}, fault.New(fault.Validation, "a session's lifetime must be from 1 s to %s, or 0 for none, not %s", MaxLifetime, lifetime)
	}
	if isDefault(id) {
		return store.Session{}, fault.New(fault.Conflict, "a default session has no lifetime; create a session with one")
	}
	sess, prof, ephemeral, err := pk.Resolve(ctx, p, id, profName)
	if err != nil {
		return store.Session{}, err
	}
	if ephemeral {
		return store.Session{}, fault.New(fault.Conflict, "profile '%s' has scope per_call and keeps no sessions", prof.Name)
	}
	if sess.OwnerID == "" && !p.Admin {
		return store.Session{}, fault.New(fault.Forbidden, "sandbox session '%s' is the one session of per_runtime profile '%s', shared by every caller; only an administrator may set its lifetime", sess.ID, prof.Name)
	}
	var at time.Time
	if lifetime > 0 {
		at = pk.Clock.Now().Add(lifetime)
	}
	if extendOnly && (at.IsZero() || !sess.ExpiresAt.IsZero() && sess.ExpiresAt.After(at)) {
		return sess, nil
	}
	if err := pk.Store.SetSessionExpiry(ctx, sess.ID, at, ""); err != nil {
		return store.Session{}, sessionErr(err, id)
	}
	sess.ExpiresAt = at
	return sess, nil
}

// SweepExpired ends the sessions whose lifetime passed: destroyed, or paused (ExpirePause;
// a session with a running execution is paused once it ended, at a later sweep). Failures are
// logged; the next sweep tries again.
func (pk *Room) SweepExpired(ctx context.Context) {
	rows, err := pk.Store.ExpiredSessions(ctx, pk.Clock.Now(), 100)
	if err != nil {
		pk.Log.Warn("listing the sessions whose lifetime ended failed", "err", err)
		return
	}
	for _, sess := range rows {
		if ctx.Err() != nil {
			return
		}
		prof := pk.Profiles.Get(sess.Profile)
		log := pk.Log.With("session_id", sess.ID, "profile", sess.Profile, "expired_at", sess.ExpiresAt)
		if prof == nil {
			log.Warn("a session's lifetime ended, but its profile is not configured on this gateway: it is left as it is")
			continue
		}
		owner, err := principal.Principal{}, error(nil)
		if sess.OwnerID != "" { // the zero principal for a shared session
			owner, err = pk.Account.Principal(ctx, sess.OwnerID)
		}
		if err != nil {
			log.Warn("reading the owner of a session whose lifetime ended failed", "err", err)
			continue
		}
		if sess.OnExpiry == ExpirePause {
			if err := pk.expirePause(ctx, prof, sess); err != nil {
				log.Warn("pausing a session whose lifetime ended failed", "err", err)
			}
			continue
		}
		pending, notice, err := pk.Expire(ctx, owner, prof, sess)
		switch {
		case err != nil:
			log.Warn("destroying a session whose lifetime ended failed", "err", err)
		case pending:
			log.Warn("a session's lifetime ended; removing its sandbox failed and is retried", "notice", notice)
		default:
			log.Info("session destroyed: its lifetime ended")
		}
	}
}

// expirePause pauses session sess, whose lifetime passed, and clears its lifetime. A session
// running an execution is left for a later sweep; one without a sandbox has nothing to pause
// (its lifetime is cleared). A profile whose provider cannot pause holds the session
// (non-strict profiles, as PauseSession does).
func (pk *Room) expirePause(ctx context.Context, prof *profile.Profile, sess store.Session) error {
	if err := pk.refuseIfRunning(ctx, sess.ID, "pause"); err != nil {
		return nil // paused once the execution ended
	}
	unlock, err := pk.lockFor(ctx, sess.ID, "pause")
	if err != nil {
		return err
	}
	defer unlock()
	cur, err := pk.Store.GetSession(ctx, sess.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if cur.ExpiresAt.IsZero() || cur.ExpiresAt.After(pk.Clock.Now()) || cur.Status == store.SessionClosed {
		return nil
	}
	if cur.SandboxID != "" && cur.PausedAt.IsZero() {
		if prof.Caps.Pause {
			if err := prof.Provider.(providers.Pauser).Pause(ctx, cur.SandboxID); err != nil && fault.KindOf(err) != fault.Gone {
				return classify(err, fault.Provision)
			}
		}
		notice := fmt.Sprintf("sandbox session '%s' was paused when its lifetime ended and has been resumed: its files, running processes and code-context variables were kept", cur.ID)
		if _, err := pk.Store.PauseSession(ctx, cur.ID, cur.SandboxID, pk.Clock.Now(), false, notice); err != nil {
			return err
		}
	}
	if err := pk.Store.SetSessionExpiry(ctx, cur.ID, time.Time{}, ""); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	pk.Log.Info("session paused: its lifetime ended", "session_id", cur.ID, "profile", prof.Name)
	return nil
}
