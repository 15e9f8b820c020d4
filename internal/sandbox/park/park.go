package park

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox/clock"
	"github.com/sandgate/sandgate/internal/sandbox/profile"
	"github.com/sandgate/sandgate/internal/store"
)

// Parking a session instead of wiping it (docs/semantics.md §8 "Pause, resume and idle
// parking"): a caller pauses and resumes a session's sandbox; the idle sweeper pauses it, or
// captures its workspace in a snapshot and removes it, as its profile's idle_action says; the
// next use resumes or restores it, with a notice saying what was kept.

// parkLockWait bounds how long pausing, resuming and the idle sweeper wait for a session's
// lock (an execution holding it).
const parkLockWait = 30 * time.Second

// PauseSession freezes session id's sandbox in place (provider capability pause): its
// files, processes and context variables are kept and it uses no CPU. Until ResumeSession
// (or, with the profile's auto_resume, its next use) operations on it answer fault.Paused.
// A paused session is never reset by the idle sweeper. Pausing a paused session changes
// nothing. It returns the session and the warnings of a non-strict profile whose provider
// cannot pause: the session is then held (operations answer fault.Paused) while its sandbox
// keeps running.
//
// Errors: fault.NotFound for an unknown or another principal's session; fault.Forbidden for
// the shared session of a per_runtime profile (admins only); fault.Conflict on per_call
// profiles, while an execution runs in the session (wait or cancel it), or when the session
// has no sandbox; fault.Capability when the provider cannot pause and the policy is strict.
func (pk *Room) PauseSession(ctx context.Context, p principal.Principal, id, profName string) (store.Session, []string, error) {
	sess, prof, err := pk.parkableSession(ctx, p, id, profName, "pause")
	if err != nil {
		return store.Session{}, nil, err
	}
	var warnings []string
	if !prof.Caps.Pause {
		warnings = []string{fmt.Sprintf("provider '%s' cannot freeze sandboxes: session '%s' is held (operations answer 409 until it is resumed) but its processes keep running, because profile '%s' has strict: false",
			prof.Provider.Type(), sess.ID, prof.Name)}
	}
	if err := pk.refuseIfRunning(ctx, sess.ID, "pause"); err != nil {
		return store.Session{}, nil, err
	}
	unlock, err := pk.lockFor(ctx, sess.ID, "pause")
	if err != nil {
		return store.Session{}, nil, err
	}
	defer unlock()
	if sess, err = pk.Store.GetSession(ctx, sess.ID); err != nil {
		return store.Session{}, nil, sessionErr(err, id)
	}
	if !sess.PausedAt.IsZero() {
		return sess, warnings, nil
	}
	if sess.SandboxID == "" {
		return store.Session{}, nil, fault.New(fault.Conflict, "sandbox session '%s' has no sandbox to pause (%s)", sess.ID, noSandboxWhy(sess))
	}
	if prof.Caps.Pause {
		if err := prof.Provider.(providers.Pauser).Pause(ctx, sess.SandboxID); err != nil {
			return store.Session{}, nil, parkErr(err, sess, "paused")
		}
	}
	if _, err := pk.Store.PauseSession(ctx, sess.ID, sess.SandboxID, pk.Clock.Now(), false, ""); err != nil {
		return store.Session{}, nil, err
	}
	if !prof.Caps.Pause {
		pk.Log.Warn(warnings[0], "session_id", sess.ID, "profile", prof.Name)
	}
	sess, err = pk.Store.GetSession(ctx, sess.ID)
	return sess, warnings, sessionErr(err, id)
}

// ResumeSession thaws session id's paused sandbox: its processes run on where they stopped.
// Resuming a session that is not paused changes nothing.
//
// Errors: as PauseSession's (but for running executions and the capability: a session
// held by a non-strict profile is released).
func (pk *Room) ResumeSession(ctx context.Context, p principal.Principal, id, profName string) (store.Session, error) {
	sess, prof, err := pk.parkableSession(ctx, p, id, profName, "resume")
	if err != nil {
		return store.Session{}, err
	}
	unlock, err := pk.lockFor(ctx, sess.ID, "resume")
	if err != nil {
		return store.Session{}, err
	}
	defer unlock()
	if sess, err = pk.Store.GetSession(ctx, sess.ID); err != nil {
		return store.Session{}, sessionErr(err, id)
	}
	if _, err := pk.Thaw(ctx, prof, &sess); err != nil {
		return store.Session{}, err
	}
	sess, err = pk.Store.GetSession(ctx, sess.ID)
	return sess, sessionErr(err, id)
}

// parkableSession resolves a session the caller may pause or resume (op). For the default
// session, what its profile alone decides is checked before the session is made on first
// use: a refused pause leaves no new session behind.
func (pk *Room) parkableSession(ctx context.Context, p principal.Principal, id, profName, op string) (store.Session, *profile.Profile, error) {
	if id == DefaultSessionID || id == "" {
		prof, err := pk.Profiles.Resolve(p, profName)
		if err != nil {
			return store.Session{}, nil, err
		}
		if err := pk.parkable(p, prof, DefaultSessionID, prof.Scope == profile.ScopePerRuntime, op); err != nil {
			return store.Session{}, nil, err
		}
	}
	sess, prof, ephemeral, err := pk.Resolve(ctx, p, id, profName)
	if err != nil {
		return store.Session{}, nil, err
	}
	if ephemeral {
		return store.Session{}, nil, pk.parkable(p, prof, id, false, op)
	}
	if err := pk.parkable(p, prof, sess.ID, sess.OwnerID == "", op); err != nil {
		return store.Session{}, nil, err
	}
	return sess, prof, nil
}

// parkable refuses op (pause, resume) on session id of prof (shared: the one session of a
// per_runtime profile) when the profile or the caller does not allow it: fault.Conflict on
// per_call and attached profiles, fault.Forbidden on a shared session but for admins,
// fault.Capability for a pause a strict profile's provider cannot do.
func (pk *Room) parkable(p principal.Principal, prof *profile.Profile, id string, shared bool, op string) error {
	switch {
	case prof.Scope == profile.ScopePerCall:
		return fault.New(fault.Conflict, "profile '%s' has scope per_call: its sandboxes live for one run and cannot be paused or resumed", prof.Name)
	case shared && !p.Admin:
		return fault.New(fault.Forbidden, "sandbox session '%s' is the one session of per_runtime profile '%s', shared by every caller; only an administrator may %s it", id, prof.Name, op)
	case prof.Attached():
		return fault.New(fault.Conflict, "profile '%s' is attached to an environment the gateway does not manage; it is never paused", prof.Name)
	case op == "pause" && !prof.Caps.Pause && prof.Policy.Strict:
		return fault.Unsupported(prof.Provider.Type(), "pause").
			WithHint("destroy the session when done, or take a snapshot (POST /v1/sessions/{id}/snapshots) if the profile supports it", "destroy the session when done")
	}
	return nil
}

// refuseIfRunning answers fault.Conflict when an execution (not a background process) of
// session id is unfinished: freezing it mid-run would hold its caller.
func (pk *Room) refuseIfRunning(ctx context.Context, id, op string) error {
	ids, err := pk.Store.UnfinishedTasks(ctx, id)
	if err != nil {
		return err
	}
	for _, tid := range ids {
		t, err := pk.Store.GetTask(ctx, tid, "")
		if err != nil || t.Background {
			continue
		}
		return fault.New(fault.Conflict, "sandbox session '%s' is running an execution (task %s); wait for it to finish or cancel it, then %s the session", id, tid, op).
			WithHint(fmt.Sprintf("poll GET /v1/tasks/%s or cancel it with POST /v1/tasks/%s/cancel", tid, tid), fmt.Sprintf("wait for task %s (check_sandbox_task) or cancel it", tid))
	}
	return nil
}

// lockFor takes session id's lock for op, waiting at most parkLockWait for the execution
// holding it: fault.Conflict then.
func (pk *Room) lockFor(ctx context.Context, id, op string) (func(), error) {
	lctx, cancel := context.WithTimeout(ctx, parkLockWait)
	defer cancel()
	unlock, err := pk.LockSession(lctx, id)
	if err != nil && ctx.Err() == nil && lctx.Err() != nil {
		return nil, fault.New(fault.Conflict, "sandbox session '%s' stayed busy for %s; try to %s it again once its executions ended", id, parkLockWait, op)
	}
	return unlock, err
}

// parkErr classifies a provider's failure to pause, resume or capture sess's sandbox (done
// is the operation, in the past tense): a sandbox that vanished is a conflict (the next use
// makes a new one), anything else the provider's kind (or fault.Provision).
func parkErr(err error, sess store.Session, done string) error {
	if fault.KindOf(err) == fault.Gone {
		return fault.New(fault.Conflict, "the sandbox of session '%s' no longer exists and cannot be %s; the next operation makes a new one", sess.ID, done)
	}
	return classify(err, fault.Provision)
}

func noSandboxWhy(sess store.Session) string {
	if sess.ParkedSnapshot != "" {
		return "it is parked in snapshot " + sess.ParkedSnapshot + " and restored on its next use"
	}
	return "none was made yet, or it was reset; the next operation makes one"
}

// Thaw thaws sess's paused sandbox (provider capability pause; a held session of a
// non-strict profile is only released) and records it, with a use now: being paused is not
// being idle. It reports whether sess was paused. Call holding the session lock.
func (pk *Room) Thaw(ctx context.Context, prof *profile.Profile, sess *store.Session) (bool, error) {
	if sess.PausedAt.IsZero() {
		return false, nil
	}
	if prof.Caps.Pause && sess.SandboxID != "" {
		if err := prof.Provider.(providers.Pauser).Resume(ctx, sess.SandboxID); err != nil && fault.KindOf(err) != fault.Gone {
			return false, classify(err, fault.Provision)
		}
		// A sandbox that vanished meanwhile is recreated by the next attach, with its notice.
	}
	if err := pk.Store.ResumeSession(ctx, sess.ID); err != nil {
		return false, err
	}
	now := pk.Clock.Now()
	if err := pk.Store.TouchSession(ctx, sess.ID, now); err != nil {
		return false, err
	}
	sess.PausedAt, sess.PausedIdle, sess.LastUsedAt = time.Time{}, false, now
	return true, nil
}

// Wake makes sess usable before an operation reaches its sandbox (docs/semantics.md §8): a
// session the idle sweeper paused is resumed (the sweeper's pending notice says so), one its
// caller paused is resumed with a notice when its profile has auto_resume, and answers
// fault.Paused otherwise. Call holding the session lock.
func (pk *Room) Wake(ctx context.Context, prof *profile.Profile, sess *store.Session) (string, error) {
	if sess.PausedAt.IsZero() {
		return "", nil
	}
	if !sess.PausedIdle && !prof.AutoResume {
		return "", PausedErr(sess.ID)
	}
	idle := sess.PausedIdle
	if _, err := pk.Thaw(ctx, prof, sess); err != nil {
		return "", err
	}
	if idle {
		return "", nil // the idle sweeper's notice is pending on the session
	}
	return fmt.Sprintf("sandbox session '%s' was paused and has been resumed for this operation (auto_resume): its files, running processes and code-context variables were kept", sess.ID), nil
}

func PausedErr(id string) error {
	return fault.New(fault.Paused, "sandbox session '%s' is paused: its files, processes and variables are kept, but nothing runs in it until it is resumed", id).
		WithHint(fmt.Sprintf("resume it with POST /v1/sessions/%s/resume", id), "ask the user to resume the session (it was paused on purpose)")
}

// Idle parking (the sweeper, sweepIdle).

// idleNotices say what the idle sweeper did, for the session's next operation.
func idlePausedNotice(prof *profile.Profile, id string) string {
	return fmt.Sprintf("sandbox session '%s' was idle for more than %ds and was paused, not wiped; it has been resumed: its files, running processes and code-context variables were kept",
		id, int(prof.IdleTimeout/time.Second))
}

func idleParkedNotice(prof *profile.Profile, id string) string {
	return fmt.Sprintf("sandbox session '%s' was idle for more than %ds: its workspace was saved in a snapshot and its sandbox removed, then restored from that snapshot for its next use; its workspace files were kept, but running processes, code-context variables and /tmp are gone",
		id, int(prof.IdleTimeout/time.Second))
}

// parkIdle pauses or snapshots idle session sess of prof (idle_action pause or snapshot)
// under its lock, when it is still idle past cutoff, unchanged and without unfinished tasks.
// Failures are logged; the next sweep tries again.
func (pk *Room) parkIdle(ctx context.Context, prof *profile.Profile, sess store.Session, cutoff time.Time) {
	unlock, err := pk.lockFor(ctx, sess.ID, "park")
	if err != nil {
		return
	}
	defer unlock()
	cur, err := pk.Store.GetSession(ctx, sess.ID)
	if err != nil || cur.SandboxID == "" || cur.SandboxID != sess.SandboxID || !cur.PausedAt.IsZero() || !cur.LastUsedAt.Before(cutoff) {
		return
	}
	if ids, err := pk.Store.UnfinishedTasks(ctx, cur.ID); err != nil || len(ids) > 0 {
		return
	}
	log := pk.Log.With("session_id", cur.ID, "profile", prof.Name, "sandbox_id", cur.SandboxID)
	switch prof.EffectiveIdleAction() {
	case profile.IdlePause:
		if err := prof.Provider.(providers.Pauser).Pause(ctx, cur.SandboxID); err != nil {
			log.Warn("pausing an idle sandbox failed", "err", err)
			return
		}
		if _, err := pk.Store.PauseSession(ctx, cur.ID, cur.SandboxID, pk.Clock.Now(), true, idlePausedNotice(prof, cur.ID)); err != nil {
			log.Warn("recording an idle pause failed", "err", err)
			return
		}
		log.Info("idle sandbox paused")
	case profile.IdleSnapshot:
		// Counted in the owner's snapshot bytes, never refused (snapshots.go).
		snap, err := pk.capture(ctx, prof, cur, store.SnapshotIdle, "idle", store.SnapshotLimits{})
		if err != nil {
			log.Warn("capturing an idle sandbox failed", "err", err)
			return
		}
		ok, err := pk.Store.ParkSession(ctx, cur.ID, cur.SandboxID, snap.ID, idleParkedNotice(prof, cur.ID))
		if err != nil || !ok {
			pk.DropSnapshot(ctx, prof, snap)
			return
		}
		_ = pk.DestroyBackend(ctx, prof, cur.ID, cur.SandboxID)
		log.Info("idle sandbox parked in a snapshot", "snapshot_id", snap.ID, "bytes", snap.SizeBytes)
	}
}

// AwaitRunning waits until session id is not paused (or gone, or ctx ends), for an
// adopter that must not reach a frozen sandbox. It reports whether the session runs.
func (pk *Room) AwaitRunning(ctx context.Context, id string) bool {
	for {
		sess, err := pk.Store.GetSession(ctx, id)
		if err == nil && sess.PausedAt.IsZero() {
			return true
		}
		if errors.Is(err, store.ErrNotFound) {
			return false
		}
		if !clock.Sleep(ctx, pk.Clock, 2*time.Second) {
			return false
		}
	}
}

// SweepIdle frees the sandboxes of sessions idle past their profile's idle_timeout (attached
// profiles are never touched) as the profile's idle_action says — destroyed (reset), paused,
// or captured in a snapshot and destroyed — and leaves the notice of what happened for their
// next operation.
func (pk *Room) SweepIdle(ctx context.Context) {
	for _, prof := range pk.Profiles.All() {
		name := prof.Name
		if prof.Attached() || prof.Scope == profile.ScopePerCall {
			continue
		}
		cutoff := pk.Clock.Now().Add(-prof.IdleTimeout)
		rows, err := pk.Store.IdleSessions(ctx, name, cutoff, 100)
		if err != nil {
			pk.Log.Warn("idle sweep failed", "profile", name, "err", err)
			continue
		}
		for _, sess := range rows {
			if prof.EffectiveIdleAction() != profile.IdleReset {
				pk.parkIdle(ctx, prof, sess, cutoff)
				continue
			}
			// Only reset when the row still points at the sandbox we destroy.
			ok, err := pk.Store.ResetIdleSession(ctx, sess.ID, IdleNotice(prof, sess.ID), pk.Clock.Now(), sess.SandboxID, cutoff)
			if err != nil || !ok {
				continue
			}
			_ = pk.DestroyBackend(ctx, prof, sess.ID, sess.SandboxID)
			pk.Log.Info("idle sandbox freed", "session_id", sess.ID, "profile", name)
		}
	}
}

// IdleNotice is the notice of session id of prof whose sandbox the idle sweeper reset.
func IdleNotice(prof *profile.Profile, id string) string {
	secs := int(prof.IdleTimeout / time.Second)
	if prof.Attached() {
		return fmt.Sprintf("sandbox session '%s' was idle for more than %ds; its binding was reset and the attached environment was left untouched", id, secs)
	}
	return fmt.Sprintf("sandbox session '%s' was idle for more than %ds and has been reset; its previous workspace state was discarded", id, secs)
}
