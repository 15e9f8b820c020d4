package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox/names"
	"github.com/sandgate/sandgate/internal/sandbox/page"
	"github.com/sandgate/sandgate/internal/sandbox/profile"
	"github.com/sandgate/sandgate/internal/store"
)

// DefaultSessionID addresses the caller's default session of a profile (seed: the omitted
// id, `default:<profile>`), created on first use.
const DefaultSessionID = "default"

// Session is a sandbox session as the caller sees it: its row (store.Session: id, owner ("" for
// the shared session of a per_runtime profile), profile, provider type, scope, name, labels,
// IsDefault — the principal's default session of its profile, id "default" in requests —,
// SandboxID — the provider's id of the live sandbox, "" while none is provisioned —, status,
// times, the pause, park and failed-destroy fields) and what the domain reads from it.
// A closed session (StateDestroyFailed) is no longer its owner's default: IsDefault is false.
type Session struct {
	store.Session
	// Shared: the one session of a per_runtime profile, used by every allowed principal.
	Shared bool
	// State is where its sandbox stands: StateNone, StateRunning, StatePaused, StateParked or
	// StateDestroyFailed. PausedAt is set for StatePaused, ParkedSnapshot for StateParked,
	// and DestroyError, DestroyAttempts and DestroyRetryAt for StateDestroyFailed.
	State string
}

// Session states (Session.State; docs/semantics.md §8).
const (
	StateNone    = "none"    // no sandbox: one is made (or restored) on first use
	StateRunning = "running" // a live sandbox
	StatePaused  = "paused"  // its sandbox is frozen: files, processes and memory kept
	StateParked  = "parked"  // no sandbox; its workspace waits in a snapshot, restored on next use
	// StateDestroyFailed: destroying it failed on the provider's side; it takes no new work
	// and its sandbox's removal is retried until the provider confirms it (Status "closed").
	StateDestroyFailed = "destroy_failed"
)

// View is the session row as the caller sees it (its State).
func View(row store.Session) Session {
	v := Session{Session: row, Shared: row.OwnerID == "", State: StateNone}
	switch {
	case row.Status == store.SessionClosed:
		// No longer its owner's default (the next use of "default" makes another one).
		v.State, v.IsDefault = StateDestroyFailed, false
	case row.SandboxID != "" && !row.PausedAt.IsZero():
		v.State = StatePaused
	case row.SandboxID != "":
		v.State = StateRunning
	case row.ParkedSnapshot != "":
		v.State = StateParked
	}
	return v
}

// CreateSessionInput is POST /v1/sessions.
type CreateSessionInput struct {
	Profile string
	Name    string
	Labels  map[string]string
	// FromSnapshot starts the session from a snapshot of the caller's (a fork): in the
	// snapshot's profile, with a sandbox restored from it at once.
	FromSnapshot string
	// Lifetime ends the session this long after it was made (0: never; 1 s to MaxLifetime),
	// as OnExpiry says: store.ExpireDestroy ("" too) or ExpirePause (the park room).
	Lifetime time.Duration
	OnExpiry string
	// Env is the session's environment: variables every program run in it gets (an
	// execution's own Env wins). Names and sizes are checked as an execution's are.
	Env map[string]string
	// CPU (cores) and MemoryMB (MiB) bound the session's sandboxes within the profile's
	// policy (0: the profile's); profile.Profile.CheckResources says what is refused.
	CPU      float64
	MemoryMB int
	// Secrets are the names of the caller's secrets the session binds (its profile's own
	// are bound anyway): its programs see each one's placeholder in SANDGATE_SECRET_<NAME>.
	Secrets []string
}

// CreateSession mints a new session on a per_session profile (seed new_session). The sandbox
// is provisioned on first use. Other scopes: fault.Conflict explaining how to use them.
//
// A control character in the name or the labels: fault.Validation (printable); so is a
// lifetime outside 1 s to MaxLifetime or an unknown OnExpiry. ExpirePause on a profile that
// cannot pause: PauseSession's refusal.
//
// With FromSnapshot the session is a fork of that snapshot: fault.NotFound for an unknown or
// another principal's snapshot (or a capture the provider lost), fault.Config for a profile
// other than the snapshot's, fault.Capability when the provider cannot restore snapshots;
// the sandbox is restored before the call returns, and a failed restore leaves no session.
func (sr *Room) CreateSession(ctx context.Context, p principal.Principal, in CreateSessionInput) (_ Session, err error) {
	ctx, span := sr.StartSpan(ctx, "sandbox.CreateSession")
	defer func() { sr.EndSpan(span, err) }()
	snap, prof, err := sr.createProfile(ctx, p, in)
	if err != nil {
		return Session{}, err
	}
	row := newSessionRow(sr.NewID(), sr.Clock.Now(), p, prof, in)
	if row.Secrets, err = sr.Secrets(ctx, p.ID, prof, in.Secrets); err != nil {
		return Session{}, err
	}
	if err := sr.Store.CreateSessionWithin(ctx, row, sr.Quota.Sessions(p)); err != nil {
		if errors.Is(err, store.ErrQuota) {
			return Session{}, sr.Quota.SessionsErr(p)
		}
		return Session{}, err
	}
	if in.FromSnapshot != "" {
		if err := sr.Park.RestoreInto(ctx, p, prof, &row, snap); err != nil {
			if derr := sr.Store.DeleteSession(context.WithoutCancel(ctx), row.ID); derr != nil {
				sr.Log.Warn("removing a session whose fork failed", "session_id", row.ID, "err", derr)
			}
			return Session{}, err
		}
		if r, err := sr.Store.GetSession(ctx, row.ID); err == nil {
			row = r
		}
	}
	sr.ids.remember(row) // its first execution needs no round trip to resolve it
	sr.Account.Record(ctx, p, store.AuditEvent{Kind: store.AuditSessionCreate, SessionID: row.ID, Profile: row.Profile})
	return View(row), nil
}

// createProfile checks what CreateSession is asked (the names and labels, the lifetime, the
// environment) and returns the profile the session is made in, with the snapshot it forks.
func (sr *Room) createProfile(ctx context.Context, p principal.Principal, in CreateSessionInput) (store.Snapshot, *profile.Profile, error) {
	if err := names.Session(in.Name, in.Labels); err != nil {
		return store.Snapshot{}, nil, err
	}
	var snap store.Snapshot
	var prof *profile.Profile
	var err error
	if in.FromSnapshot != "" {
		snap, prof, err = sr.Park.ForkProfile(ctx, p, in.FromSnapshot, in.Profile)
	} else {
		prof, err = sr.Profiles.Resolve(p, in.Profile)
	}
	if err != nil {
		return store.Snapshot{}, nil, err
	}
	if err := sr.Park.CheckLifetime(p, prof, in.Lifetime, in.OnExpiry); err != nil {
		return store.Snapshot{}, nil, err
	}
	if err := providers.CheckEnv(in.Env); err != nil {
		return store.Snapshot{}, nil, err
	}
	if err := prof.CheckResources(in.CPU, in.MemoryMB); err != nil {
		return store.Snapshot{}, nil, err
	}
	switch prof.Scope {
	case profile.ScopePerCall:
		return store.Snapshot{}, nil, fault.New(fault.Conflict, "cannot create a session for profile '%s': scope per_call runs every operation in a fresh sandbox", prof.Name).
			WithHint("use POST /v1/runs", fmt.Sprintf("call run_code or run_command with profile='%s' instead", prof.Name))
	case profile.ScopePerRuntime:
		return store.Snapshot{}, nil, fault.New(fault.Conflict, "cannot create a session for profile '%s': scope per_runtime has one shared session", prof.Name).
			WithHint(fmt.Sprintf("address it as '%s' with ?profile=%s", DefaultSessionID, prof.Name), fmt.Sprintf("omit sandbox_session_id and pass profile='%s' to use it", prof.Name))
	}
	return snap, prof, nil
}

// newSessionRow is the row of a session p makes in prof as in asks, now, with id.
func newSessionRow(id string, now time.Time, p principal.Principal, prof *profile.Profile, in CreateSessionInput) store.Session {
	row := store.Session{
		ID: id, OwnerID: p.ID, Profile: prof.Name, Provider: prof.Provider.Type(), Scope: prof.Scope,
		Name: in.Name, Labels: in.Labels, Status: "active", CreatedAt: now, LastUsedAt: now, OnExpiry: in.OnExpiry,
		Env: maps.Clone(in.Env), CPU: in.CPU, MemoryMB: in.MemoryMB,
	}
	if in.Lifetime > 0 {
		row.ExpiresAt = now.Add(in.Lifetime)
	}
	if row.OnExpiry == "" {
		row.OnExpiry = store.ExpireDestroy
	}
	if row.Labels == nil {
		row.Labels = map[string]string{}
	}
	return row
}

// Resolve finds the session id (or DefaultSessionID) for p, checking ownership, the
// requested profile (seed _resolve_profile_name / _resolve_session) and — on every
// operation, not only when the session was made — that p may still use the session's
// profile: a session made while in an allowed group is refused (fault.Policy) once the
// caller's token no longer carries the group. per_call profiles yield an ephemeral, unsaved
// session.
func (sr *Room) Resolve(ctx context.Context, p principal.Principal, id, profName string) (store.Session, *profile.Profile, bool, error) {
	return sr.ResolveVia(ctx, p, id, profName, false)
}

// ResolveVia is resolve that, with cached, may take the session's identity from
// sr.ids instead of a round trip: for an execution, whose BeginTask checks that the
// session still exists.
func (sr *Room) ResolveVia(ctx context.Context, p principal.Principal, id, profName string, cached bool) (store.Session, *profile.Profile, bool, error) {
	sess, prof, ephemeral, err := sr.viewVia(ctx, p, id, profName, cached)
	if err == nil && sess.Status == store.SessionClosed {
		return store.Session{}, nil, false, ClosedErr(sess)
	}
	return sess, prof, ephemeral, err
}

// viewVia is ResolveVia for reading a session: a closed one is found (its owner sees it).
func (sr *Room) viewVia(ctx context.Context, p principal.Principal, id, profName string, cached bool) (store.Session, *profile.Profile, bool, error) {
	sess, prof, ephemeral, err := sr.lookupVia(ctx, p, id, profName, cached)
	if err == nil && !profile.Allowed(p, prof) {
		return store.Session{}, nil, false, fault.New(fault.Policy,
			"sandbox session '%s' uses profile '%s', which is restricted to members of %v, and this token is in none of them; a session can still be destroyed",
			id, prof.Name, prof.AllowedGroups)
	}
	return sess, prof, ephemeral, err
}

// ClosedErr is the refusal of work in closed session sess (StateDestroyFailed):
// fault.Conflict naming the provider's error and what to do.
func ClosedErr(sess store.Session) error {
	return fault.New(fault.Conflict, "sandbox session '%s' is being destroyed and takes no new work: removing its sandbox failed (%s) and the gateway retries until it is gone; use another session",
		sess.ID, sess.DestroyError).
		WithHint(fmt.Sprintf("DELETE /v1/sessions/%s retries the removal now; create a session with POST /v1/sessions", sess.ID),
			"start a new session (new_sandbox_session) or omit sandbox_session_id")
}

// Lookup is resolve without the group check (destroying a session stays possible after a
// group was lost).
func (sr *Room) Lookup(ctx context.Context, p principal.Principal, id, profName string) (store.Session, *profile.Profile, bool, error) {
	return sr.lookupVia(ctx, p, id, profName, false)
}

// lookupVia is lookup that, with cached, may take the session's identity from
// sr.ids instead of a round trip (resolveVia).
func (sr *Room) lookupVia(ctx context.Context, p principal.Principal, id, profName string, cached bool) (store.Session, *profile.Profile, bool, error) {
	if id == DefaultSessionID || id == "" {
		return sr.lookupDefault(ctx, p, profName, cached)
	}
	sess, ok := sr.ids.get(id)
	var err error
	if !ok || !cached {
		if sess, err = sr.Store.GetSession(ctx, id); err == nil {
			sr.ids.remember(sess)
		}
	}
	if errors.Is(err, store.ErrNotFound) || (err == nil && !sr.Visible(p, sess)) {
		return store.Session{}, nil, false, fault.New(fault.NotFound, "unknown sandbox session '%s'", id)
	}
	if err != nil {
		return store.Session{}, nil, false, err
	}
	prof, err := sr.sessionProfile(p, sess, profName)
	if err != nil {
		return store.Session{}, nil, false, err
	}
	return sess, prof, false, nil
}

// lookupDefault finds (or makes, on first use) p's default session of profile: an
// ephemeral, unsaved one on per_call profiles, the one shared session on per_runtime ones.
func (sr *Room) lookupDefault(ctx context.Context, p principal.Principal, profName string, cached bool) (store.Session, *profile.Profile, bool, error) {
	prof, err := sr.Profiles.Resolve(p, profName)
	if err != nil {
		return store.Session{}, nil, false, err
	}
	now := sr.Clock.Now()
	cand := store.Session{
		ID: sr.NewID(), OwnerID: p.ID, Profile: prof.Name, Provider: prof.Provider.Type(), Scope: prof.Scope,
		Status: "active", CreatedAt: now, LastUsedAt: now, Labels: map[string]string{},
	}
	if prof.Scope == profile.ScopePerRuntime {
		cand.OwnerID = ""
	}
	if prof.Scope != profile.ScopePerCall {
		if sess, ok := sr.ids.defaultOf(cand.OwnerID, prof.Name); ok && cached {
			return sess, prof, false, nil
		}
	}
	// The profile's own secrets, with placeholders of the session's (kept by a default one).
	if cand.Secrets, err = sr.Secrets(ctx, cand.OwnerID, prof, nil); err != nil {
		return store.Session{}, nil, false, err
	}
	if prof.Scope == profile.ScopePerCall {
		return cand, prof, true, nil
	}
	sess, err := sr.Store.EnsureDefaultSession(ctx, cand)
	if err == nil {
		sr.ids.remember(sess)
		if sess.ID == cand.ID { // this call made it
			sr.Account.Record(ctx, p, store.AuditEvent{Kind: store.AuditSessionCreate, SessionID: sess.ID, Profile: sess.Profile})
		}
	}
	return sess, prof, false, err
}

// sessionProfile is the profile of sess, which p found by its id asking for profile ("":
// any): fault.Config for another profile than asked or one no longer configured; an API
// key's refusal (profile.KeyRefusal); fault.Conflict on per_call profiles, which keep no
// sessions (seed: per_call ignores an explicit id).
func (sr *Room) sessionProfile(p principal.Principal, sess store.Session, profName string) (*profile.Profile, error) {
	if profName != "" && profName != sess.Profile {
		return nil, fault.New(fault.Config,
			"sandbox session '%s' belongs to profile '%s', but profile '%s' was requested; omit profile to reuse a session", sess.ID, sess.Profile, profName)
	}
	prof, ok := sr.Profiles.Lookup(sess.Profile)
	if !ok {
		return nil, fault.New(fault.Config, "sandbox session '%s' uses profile '%s', which is no longer configured; destroy the session", sess.ID, sess.Profile)
	}
	if err := profile.KeyRefusal(p, prof.Name); err != nil {
		return nil, err
	}
	if prof.Scope == profile.ScopePerCall {
		return nil, fault.New(fault.Conflict, "profile '%s' has scope per_call", prof.Name).
			WithHint("use POST /v1/runs", fmt.Sprintf("omit sandbox_session_id and pass profile='%s'", prof.Name))
	}
	return prof, nil
}

// Visible reports whether p may see sess: its own sessions, the shared sessions of profiles
// it may use, everything for admins.
func (sr *Room) Visible(p principal.Principal, sess store.Session) bool {
	if p.Admin || sess.OwnerID == p.ID {
		return true
	}
	if sess.OwnerID == "" {
		prof, ok := sr.Profiles.Lookup(sess.Profile)
		return ok && profile.Allowed(p, prof)
	}
	return false
}

// GetSession returns one session, also one being destroyed (StateDestroyFailed);
// DefaultSessionID creates the default session on first use.
func (sr *Room) GetSession(ctx context.Context, p principal.Principal, id, profName string) (Session, error) {
	sess, prof, ephemeral, err := sr.viewVia(ctx, p, id, profName, false)
	if err != nil {
		return Session{}, err
	}
	if ephemeral {
		return Session{}, fault.New(fault.Conflict, "profile '%s' has scope per_call and keeps no sessions", prof.Name).
			WithHint("use POST /v1/runs", fmt.Sprintf("call run_code or run_command with profile='%s'", prof.Name))
	}
	return View(sess), nil
}

// ListFilter selects sessions.
type ListFilter struct {
	Profile, Status, Conversation string
	// Labels selects the sessions carrying every one of these labels.
	Labels map[string]string
	All    bool // admins only
	Limit  int
	Cursor string
}

// ListSessions returns a page of p's sessions (all sessions for an admin with All) and the
// cursor of the next page ("" on the last).
func (sr *Room) ListSessions(ctx context.Context, p principal.Principal, f ListFilter) ([]Session, string, error) {
	if f.All && !p.Admin {
		return nil, "", fault.New(fault.Forbidden, "all=true lists every principal's sessions and needs membership of an admin group")
	}
	t, id, err := page.Decode(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	rows, err := sr.Store.ListSessions(ctx, store.SessionFilter{
		OwnerID: p.ID, All: f.All, Profile: f.Profile, Status: f.Status, Conversation: f.Conversation, Labels: f.Labels,
		Limit: f.Limit + 1, AfterCreated: t, AfterID: id,
	})
	if err != nil {
		return nil, "", err
	}
	var out []Session
	for _, r := range rows {
		if f.All || sr.Visible(p, r) {
			out = append(out, View(r))
		}
	}
	next := ""
	if len(rows) > f.Limit {
		out = out[:min(len(out), f.Limit)]
		last := rows[f.Limit-1]
		next = page.Encode(last.CreatedAt, last.ID)
	}
	return out, next, nil
}

// Destroyed is what DestroySession did.
type Destroyed struct {
	// SessionID is the session destroyed (the id given, for an unknown one).
	SessionID string
	// Pending: the provider failed to remove the session's sandbox. The session is kept,
	// closed for new work (StateDestroyFailed), and the removal is retried in the background
	// until the provider confirms it; Notice says so, with the provider's error.
	Pending bool
	Notice  string

	failure fault.Kind // Pending: the kind of the provider's error
}

// Backoff of the retries of a failed sandbox destroy (the sweeper's, retryDestroys): the
// first retry destroyRetryMin after the failure, doubling up to destroyRetryMax.
const (
	destroyRetryMin = 30 * time.Second
	destroyRetryMax = 30 * time.Minute
)

// destroyRetryAfter is the wait before the next attempt after the attempts-th failure.
func destroyRetryAfter(attempts int) time.Duration {
	d := destroyRetryMin
	for i := 1; i < attempts && d < destroyRetryMax; i++ {
		d *= 2
	}
	return min(d, destroyRetryMax)
}

// DestroySession destroys the session's sandbox (attached profiles: only the binding) and
// forgets the session. Idempotent: unknown ids succeed. Destroying "default" resets the
// default session. The shared session of a per_runtime profile is destroyed by admins only
// (fault.Forbidden): every caller works in it.
//
// When the provider fails to destroy the sandbox (one already gone counts as destroyed), the
// session is not forgotten — that would leave a sandbox no session points to — but closed
// (StateDestroyFailed): it takes no new work (fault.Conflict), is listed, is no longer a
// default or shared session, and the sweeper retries the removal with backoff until the
// provider confirms it (retryDestroys); the answer is Pending. Destroying it again retries
// at once.
func (sr *Room) DestroySession(ctx context.Context, p principal.Principal, id, profName string) (_ Destroyed, err error) {
	ctx, span := sr.StartSpan(ctx, "sandbox.DestroySession")
	defer func() { sr.EndSpan(span, err) }()
	sess, prof, ephemeral, err := sr.Lookup(ctx, p, id, profName)
	if fault.IsKind(err, fault.NotFound) {
		return Destroyed{SessionID: id}, nil
	}
	if err != nil {
		return Destroyed{}, err
	}
	if ephemeral {
		return Destroyed{SessionID: id}, nil
	}
	if sess.OwnerID == "" && !p.Admin {
		return Destroyed{}, fault.New(fault.Forbidden, "sandbox session '%s' is the one session of per_runtime profile '%s', shared by every caller (files, variables, environment and processes); only an administrator may destroy it", sess.ID, prof.Name)
	}
	// A paused sandbox is thawed first: its processes are stopped like any others.
	if !sess.PausedAt.IsZero() {
		if _, err := sr.Park.Thaw(ctx, prof, &sess); err != nil {
			sr.Log.Warn("resuming a paused sandbox before destroying it failed", "session_id", sess.ID, "err", err)
		}
	}
	// Stop the session's running and queued work first (an execution must not outlive its
	// sandbox, and destroying must not wait for a long run), then wait for it to let go.
	if ids, err := sr.Store.UnfinishedTasks(ctx, sess.ID); err == nil {
		for _, id := range ids {
			sr.CancelTask(ctx, p, id, "the session was destroyed")
		}
	}
	unlock, err := sr.Lock(ctx, sess.ID)
	if err != nil {
		return Destroyed{}, err
	}
	defer unlock()
	if cur, err := sr.Store.GetSession(ctx, sess.ID); err == nil {
		sess = cur // an operation that waited before us may have changed the sandbox
	}
	event := store.AuditEvent{Kind: store.AuditSessionDestroy, SessionID: sess.ID, Profile: sess.Profile}
	out, err := sr.finishDestroy(ctx, prof, sess)
	if err != nil {
		return Destroyed{}, err
	}
	if out.Pending {
		event.Status, event.ErrorType = "failed", string(out.failure)
	}
	sr.Account.Record(ctx, p, event)
	return out, nil
}

// ExpireDestroy destroys session sess, whose lifetime passed, as DestroySession does for its
// owner: its work is cancelled, its sandbox removed (or its removal retried), the row
// forgotten, and the destruction audited as its owner'sr.
func (sr *Room) ExpireDestroy(ctx context.Context, owner principal.Principal, prof *profile.Profile, sess store.Session) (Destroyed, error) {
	if !sess.PausedAt.IsZero() {
		if _, err := sr.Park.Thaw(ctx, prof, &sess); err != nil {
			sr.Log.Warn("resuming a paused sandbox before destroying it failed", "session_id", sess.ID, "err", err)
		}
	}
	if ids, err := sr.Store.UnfinishedTasks(ctx, sess.ID); err == nil {
		for _, id := range ids {
			_ = sr.CancelTask(ctx, owner, id, "the session's lifetime ended")
		}
	}
	unlock, err := sr.Lock(ctx, sess.ID)
	if err != nil {
		return Destroyed{}, err
	}
	defer unlock()
	cur, err := sr.Store.GetSession(ctx, sess.ID)
	if errors.Is(err, store.ErrNotFound) {
		return Destroyed{SessionID: sess.ID}, nil // destroyed meanwhile
	}
	if err != nil {
		return Destroyed{}, err
	}
	if cur.ExpiresAt.IsZero() || cur.ExpiresAt.After(sr.Clock.Now()) || cur.Status == store.SessionClosed {
		return Destroyed{SessionID: sess.ID}, nil // given more time meanwhile
	}
	out, err := sr.finishDestroy(ctx, prof, cur)
	if err != nil {
		return Destroyed{}, err
	}
	event := store.AuditEvent{Kind: store.AuditSessionDestroy, SessionID: cur.ID, Profile: cur.Profile}
	if out.Pending {
		event.Status, event.ErrorType = "failed", string(out.failure)
	}
	if owner.ID != "" {
		sr.Account.Record(ctx, owner, event)
	}
	return out, nil
}

// finishDestroy destroys closed or closing session sess's sandbox and forgets the session —
// or, when the provider fails, closes it (or keeps it closed) with its next retry due after
// backoff. Call holding the session lock, or for a closed session (which takes no work).
func (sr *Room) finishDestroy(ctx context.Context, prof *profile.Profile, sess store.Session) (Destroyed, error) {
	if err := sr.DestroyBackend(ctx, prof, sess.ID, sess.SandboxID); err != nil {
		attempts := sess.DestroyAttempts + 1
		retry := destroyRetryAfter(attempts)
		why := err.Error()
		ok, serr := sr.Store.DestroyFailed(context.WithoutCancel(ctx), sess.ID, sess.SandboxID, why, sr.Clock.Now().Add(retry))
		if serr != nil {
			return Destroyed{}, serr
		}
		sr.ids.forget(sess.ID)
		if ok {
			sr.Log.Warn("destroying a session's sandbox failed: the session is kept, closed, and the removal retried", "session_id", sess.ID,
				"sandbox_id", sess.SandboxID, "profile", prof.Name, "attempts", attempts, "retry_in", retry.String(), "err", err)
			return Destroyed{SessionID: sess.ID, Pending: true, failure: fault.KindOf(classify(err, fault.Provision)), Notice: fmt.Sprintf(
				"the sandbox of session '%s' could not be removed (%s); the session is kept, takes no new work, and the gateway retries the removal until the provider confirms it (next in %s); DELETE it again to retry now",
				sess.ID, why, retry)}, nil
		}
		// Gone meanwhile (another destroy), or its sandbox changed: nothing to keep.
	}
	if sess.ParkedSnapshot != "" {
		// The capture the idle session was parked in goes with it (its user snapshots stay).
		if snap, err := sr.Store.GetSnapshot(ctx, sess.ParkedSnapshot); err == nil && snap.Kind == store.SnapshotIdle {
			sr.Park.DropSnapshot(ctx, prof, snap)
		}
	}
	if err := sr.Store.DeleteSession(context.WithoutCancel(ctx), sess.ID); err != nil {
		return Destroyed{}, err
	}
	sr.ids.forget(sess.ID)
	return Destroyed{SessionID: sess.ID}, nil
}

// DestroyBackend destroys a managed sandbox under the gateway's own identity (seed
// _destroy_backend), bounded to 2 minutes. A sandbox already gone is destroyed; failures are
// logged and returned (callers that forget the sandbox anyway leave it to the orphan sweep).
func (sr *Room) DestroyBackend(ctx context.Context, prof *profile.Profile, sessionID, sandboxID string) error {
	if sandboxID == "" || prof.Attached() {
		return nil
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	err := sr.Call(dctx, prof, "destroy", func(ctx context.Context) error { return prof.Provider.Destroy(ctx, sandboxID) })
	if err != nil && fault.KindOf(err) != fault.Gone {
		sr.Log.Warn("destroying sandbox failed", "session_id", sessionID, "sandbox_id", sandboxID, "profile", prof.Name, "err", err)
		return err
	}
	return nil
}

// Lock serialises executions and writes of session id in arrival order, in-process and
// across replicas.
func (sr *Room) Lock(ctx context.Context, id string) (func(), error) {
	unlock, err := sr.Store.LockSession(ctx, id)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, classifyAs(err, fault.Broker, "could not take the session lock")
	}
	return unlock, nil
}

// RetryDestroys retries removing the sandboxes of closed sessions (StateDestroyFailed) whose
// next attempt is due: a session whose provider confirms (or finds the sandbox gone) is
// forgotten, the others wait longer (destroyRetryAfter). A session of a profile no longer
// configured waits too: no provider here can remove its sandbox.
func (sr *Room) RetryDestroys(ctx context.Context) {
	rows, err := sr.Store.DestroyRetries(ctx, sr.Clock.Now(), 100)
	if err != nil {
		sr.Log.Warn("listing the sessions whose sandbox removal failed", "err", err)
		return
	}
	for _, sess := range rows {
		if ctx.Err() != nil {
			return
		}
		prof := sr.Profiles.Get(sess.Profile)
		if prof == nil {
			why := fmt.Sprintf("profile '%s' is not configured on this gateway: no provider can remove its sandbox %s", sess.Profile, sess.SandboxID)
			if _, err := sr.Store.DestroyFailed(ctx, sess.ID, sess.SandboxID, why, sr.Clock.Now().Add(destroyRetryAfter(sess.DestroyAttempts+1))); err != nil {
				sr.Log.Warn("recording a failed sandbox removal failed", "session_id", sess.ID, "err", err)
			}
			continue
		}
		out, err := sr.finishDestroy(ctx, prof, sess)
		switch {
		case err != nil:
			sr.Log.Warn("retrying a sandbox removal failed", "session_id", sess.ID, "err", err)
		case !out.Pending:
			sr.Log.Info("sandbox of a closed session removed at last; session forgotten", "session_id", sess.ID, "profile", sess.Profile, "attempts", sess.DestroyAttempts+1)
		}
	}
}
