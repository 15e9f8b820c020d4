package sandbox

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
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

func view(s store.Session) Session {
	v := Session{Session: s, Shared: s.OwnerID == "", State: StateNone}
	switch {
	case s.Status == store.SessionClosed:
		// No longer its owner's default (the next use of "default" makes another one).
		v.State, v.IsDefault = StateDestroyFailed, false
	case s.SandboxID != "" && !s.PausedAt.IsZero():
		v.State = StatePaused
	case s.SandboxID != "":
		v.State = StateRunning
	case s.ParkedSnapshot != "":
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
	// as OnExpiry says: ExpireDestroy ("" too) or ExpirePause (lifetime.go).
	Lifetime time.Duration
	OnExpiry string
	// Env is the session's environment: variables every program run in it gets (an
	// execution's own Env wins). Names and sizes are checked as an execution's are.
	Env map[string]string
	// CPU (cores) and MemoryMB (MiB) bound the session's sandboxes within the profile's
	// policy (0: the profile's); checkResources says what is refused.
	CPU      float64
	MemoryMB int
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
func (s *Service) CreateSession(ctx context.Context, p principal.Principal, in CreateSessionInput) (_ Session, err error) {
	ctx, span := s.startSpan(ctx, "sandbox.CreateSession")
	defer func() { endSpan(span, err) }()
	if err := printableSession(in.Name, in.Labels); err != nil {
		return Session{}, err
	}
	var snap store.Snapshot
	var prof *Profile
	if in.FromSnapshot != "" {
		snap, prof, err = s.forkProfile(ctx, p, in.FromSnapshot, in.Profile)
	} else {
		prof, err = s.profiles.Resolve(p, in.Profile)
	}
	if err != nil {
		return Session{}, err
	}
	if err := s.checkLifetime(p, prof, in.Lifetime, in.OnExpiry); err != nil {
		return Session{}, err
	}
	if err := providers.CheckEnv(in.Env); err != nil {
		return Session{}, err
	}
	if err := checkResources(prof, in.CPU, in.MemoryMB); err != nil {
		return Session{}, err
	}
	switch prof.Scope {
	case ScopePerCall:
		return Session{}, fault.New(fault.Conflict, "cannot create a session for profile '%s': scope per_call runs every operation in a fresh sandbox", prof.Name).
			WithHint("use POST /v1/runs", fmt.Sprintf("call run_code or run_command with profile='%s' instead", prof.Name))
	case ScopePerRuntime:
		return Session{}, fault.New(fault.Conflict, "cannot create a session for profile '%s': scope per_runtime has one shared session", prof.Name).
			WithHint(fmt.Sprintf("address it as '%s' with ?profile=%s", DefaultSessionID, prof.Name), fmt.Sprintf("omit sandbox_session_id and pass profile='%s' to use it", prof.Name))
	}
	now := s.now()
	row := store.Session{
		ID: s.newID(), OwnerID: p.ID, Profile: prof.Name, Provider: prof.Provider.Type(), Scope: prof.Scope,
		Name: in.Name, Labels: in.Labels, Status: "active", CreatedAt: now, LastUsedAt: now, OnExpiry: in.OnExpiry,
		Env: maps.Clone(in.Env), CPU: in.CPU, MemoryMB: in.MemoryMB,
	}
	if in.Lifetime > 0 {
		row.ExpiresAt = now.Add(in.Lifetime)
	}
	if row.OnExpiry == "" {
		row.OnExpiry = ExpireDestroy
	}
	if row.Labels == nil {
		row.Labels = map[string]string{}
	}
	if err := s.store.CreateSessionWithin(ctx, row, s.sessionLimit(p)); err != nil {
		if errors.Is(err, store.ErrQuota) {
			return Session{}, s.sessionQuotaErr(p)
		}
		return Session{}, err
	}
	if in.FromSnapshot != "" {
		if err := s.restoreInto(ctx, p, prof, &row, snap); err != nil {
			if derr := s.store.DeleteSession(context.WithoutCancel(ctx), row.ID); derr != nil {
				s.log.Warn("removing a session whose fork failed", "session_id", row.ID, "err", derr)
			}
			return Session{}, err
		}
		if r, err := s.store.GetSession(ctx, row.ID); err == nil {
			row = r
		}
	}
	s.sessionIDs.remember(row) // its first execution needs no round trip to resolve it
	s.audit(ctx, p, store.AuditEvent{Kind: store.AuditSessionCreate, SessionID: row.ID, Profile: row.Profile})
	return view(row), nil
}

// resolve finds the session id (or DefaultSessionID) for p, checking ownership, the
// requested profile (seed _resolve_profile_name / _resolve_session) and — on every
// operation, not only when the session was made — that p may still use the session's
// profile: a session made while in an allowed group is refused (fault.Policy) once the
// caller's token no longer carries the group. per_call profiles yield an ephemeral, unsaved
// session.
func (s *Service) resolve(ctx context.Context, p principal.Principal, id, profile string) (store.Session, *Profile, bool, error) {
	return s.resolveVia(ctx, p, id, profile, false)
}

// resolveVia is resolve that, with cached, may take the session's identity from
// s.sessionIDs instead of a round trip: for an execution, whose BeginTask checks that the
// session still exists.
func (s *Service) resolveVia(ctx context.Context, p principal.Principal, id, profile string, cached bool) (store.Session, *Profile, bool, error) {
	sess, prof, ephemeral, err := s.viewVia(ctx, p, id, profile, cached)
	if err == nil && sess.Status == store.SessionClosed {
		return store.Session{}, nil, false, closedErr(sess)
	}
	return sess, prof, ephemeral, err
}

// viewVia is resolveVia for reading a session: a closed one is found (its owner sees it).
func (s *Service) viewVia(ctx context.Context, p principal.Principal, id, profile string, cached bool) (store.Session, *Profile, bool, error) {
	sess, prof, ephemeral, err := s.lookupVia(ctx, p, id, profile, cached)
	if err == nil && !allowed(p, prof) {
		return store.Session{}, nil, false, fault.New(fault.Policy,
			"sandbox session '%s' uses profile '%s', which is restricted to members of %v, and this token is in none of them; a session can still be destroyed",
			id, prof.Name, prof.AllowedGroups)
	}
	return sess, prof, ephemeral, err
}

// closedErr is the refusal of work in closed session sess (StateDestroyFailed):
// fault.Conflict naming the provider's error and what to do.
func closedErr(sess store.Session) error {
	return fault.New(fault.Conflict, "sandbox session '%s' is being destroyed and takes no new work: removing its sandbox failed (%s) and the gateway retries until it is gone; use another session",
		sess.ID, sess.DestroyError).
		WithHint(fmt.Sprintf("DELETE /v1/sessions/%s retries the removal now; create a session with POST /v1/sessions", sess.ID),
			"start a new session (new_sandbox_session) or omit sandbox_session_id")
}

// lookup is resolve without the group check (destroying a session stays possible after a
// group was lost).
func (s *Service) lookup(ctx context.Context, p principal.Principal, id, profile string) (store.Session, *Profile, bool, error) {
	return s.lookupVia(ctx, p, id, profile, false)
}

func (s *Service) lookupVia(ctx context.Context, p principal.Principal, id, profile string, cached bool) (store.Session, *Profile, bool, error) {
	if id == DefaultSessionID || id == "" {
		prof, err := s.profiles.Resolve(p, profile)
		if err != nil {
			return store.Session{}, nil, false, err
		}
		now := s.now()
		cand := store.Session{
			ID: s.newID(), OwnerID: p.ID, Profile: prof.Name, Provider: prof.Provider.Type(), Scope: prof.Scope,
			Status: "active", CreatedAt: now, LastUsedAt: now, Labels: map[string]string{},
		}
		switch prof.Scope {
		case ScopePerCall:
			return cand, prof, true, nil
		case ScopePerRuntime:
			cand.OwnerID = ""
		}
		if sess, ok := s.sessionIDs.defaultOf(cand.OwnerID, prof.Name); ok && cached {
			return sess, prof, false, nil
		}
		sess, err := s.store.EnsureDefaultSession(ctx, cand)
		if err == nil {
			s.sessionIDs.remember(sess)
			if sess.ID == cand.ID { // this call made it
				s.audit(ctx, p, store.AuditEvent{Kind: store.AuditSessionCreate, SessionID: sess.ID, Profile: sess.Profile})
			}
		}
		return sess, prof, false, err
	}
	sess, ok := s.sessionIDs.get(id)
	var err error
	if !ok || !cached {
		if sess, err = s.store.GetSession(ctx, id); err == nil {
			s.sessionIDs.remember(sess)
		}
	}
	if errors.Is(err, store.ErrNotFound) || (err == nil && !s.visible(p, sess)) {
		return store.Session{}, nil, false, fault.New(fault.NotFound, "unknown sandbox session '%s'", id)
	}
	if err != nil {
		return store.Session{}, nil, false, err
	}
	if profile != "" && profile != sess.Profile {
		return store.Session{}, nil, false, fault.New(fault.Config,
			"sandbox session '%s' belongs to profile '%s', but profile '%s' was requested; omit profile to reuse a session", id, sess.Profile, profile)
	}
	prof, ok := s.profiles.Lookup(sess.Profile)
	if !ok {
		return store.Session{}, nil, false, fault.New(fault.Config, "sandbox session '%s' uses profile '%s', which is no longer configured; destroy the session", id, sess.Profile)
	}
	if err := keyRefusal(p, prof.Name); err != nil {
		return store.Session{}, nil, false, err
	}
	if prof.Scope == ScopePerCall { // seed: per_call ignores an explicit id
		return store.Session{}, nil, false, fault.New(fault.Conflict, "profile '%s' has scope per_call", prof.Name).
			WithHint("use POST /v1/runs", fmt.Sprintf("omit sandbox_session_id and pass profile='%s'", prof.Name))
	}
	return sess, prof, false, nil
}

// visible: own sessions; shared sessions of profiles p may use; everything for admins.
func (s *Service) visible(p principal.Principal, sess store.Session) bool {
	if p.Admin || sess.OwnerID == p.ID {
		return true
	}
	if sess.OwnerID == "" {
		prof, ok := s.profiles.Lookup(sess.Profile)
		return ok && allowed(p, prof)
	}
	return false
}

// GetSession returns one session, also one being destroyed (StateDestroyFailed);
// DefaultSessionID creates the default session on first use.
func (s *Service) GetSession(ctx context.Context, p principal.Principal, id, profile string) (Session, error) {
	sess, prof, ephemeral, err := s.viewVia(ctx, p, id, profile, false)
	if err != nil {
		return Session{}, err
	}
	if ephemeral {
		return Session{}, fault.New(fault.Conflict, "profile '%s' has scope per_call and keeps no sessions", prof.Name).
			WithHint("use POST /v1/runs", fmt.Sprintf("call run_code or run_command with profile='%s'", prof.Name))
	}
	return view(sess), nil
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
func (s *Service) ListSessions(ctx context.Context, p principal.Principal, f ListFilter) ([]Session, string, error) {
	if f.All && !p.Admin {
		return nil, "", fault.New(fault.Forbidden, "all=true lists every principal's sessions and needs membership of an admin group")
	}
	t, id, err := decodeCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.store.ListSessions(ctx, store.SessionFilter{
		OwnerID: p.ID, All: f.All, Profile: f.Profile, Status: f.Status, Conversation: f.Conversation, Labels: f.Labels,
		Limit: f.Limit + 1, AfterCreated: t, AfterID: id,
	})
	if err != nil {
		return nil, "", err
	}
	var out []Session
	for _, r := range rows {
		if f.All || s.visible(p, r) {
			out = append(out, view(r))
		}
	}
	next := ""
	if len(rows) > f.Limit {
		out = out[:min(len(out), f.Limit)]
		last := rows[f.Limit-1]
		next = encodeCursor(last.CreatedAt, last.ID)
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
func (s *Service) DestroySession(ctx context.Context, p principal.Principal, id, profile string) (_ Destroyed, err error) {
	ctx, span := s.startSpan(ctx, "sandbox.DestroySession")
	defer func() { endSpan(span, err) }()
	sess, prof, ephemeral, err := s.lookup(ctx, p, id, profile)
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
		if _, err := s.thaw(ctx, prof, &sess); err != nil {
			s.log.Warn("resuming a paused sandbox before destroying it failed", "session_id", sess.ID, "err", err)
		}
	}
	// Stop the session's running and queued work first (an execution must not outlive its
	// sandbox, and destroying must not wait for a long run), then wait for it to let go.
	if ids, err := s.store.UnfinishedTasks(ctx, sess.ID); err == nil {
		for _, id := range ids {
			s.cancelTask(ctx, p, id, "the session was destroyed")
		}
	}
	unlock, err := s.lockSession(ctx, sess.ID)
	if err != nil {
		return Destroyed{}, err
	}
	defer unlock()
	if cur, err := s.store.GetSession(ctx, sess.ID); err == nil {
		sess = cur // an operation that waited before us may have changed the sandbox
	}
	event := store.AuditEvent{Kind: store.AuditSessionDestroy, SessionID: sess.ID, Profile: sess.Profile}
	out, err := s.finishDestroy(ctx, prof, sess)
	if err != nil {
		return Destroyed{}, err
	}
	if out.Pending {
		event.Status, event.ErrorType = "failed", string(out.failure)
	}
	s.audit(ctx, p, event)
	return out, nil
}

// finishDestroy destroys closed or closing session sess's sandbox and forgets the session —
// or, when the provider fails, closes it (or keeps it closed) with its next retry due after
// backoff. Call holding the session lock, or for a closed session (which takes no work).
func (s *Service) finishDestroy(ctx context.Context, prof *Profile, sess store.Session) (Destroyed, error) {
	if err := s.destroyBackend(ctx, prof, sess.ID, sess.SandboxID); err != nil {
		attempts := sess.DestroyAttempts + 1
		retry := destroyRetryAfter(attempts)
		why := err.Error()
		ok, serr := s.store.DestroyFailed(context.WithoutCancel(ctx), sess.ID, sess.SandboxID, why, s.now().Add(retry))
		if serr != nil {
			return Destroyed{}, serr
		}
		s.sessionIDs.forget(sess.ID)
		if ok {
			s.log.Warn("destroying a session's sandbox failed: the session is kept, closed, and the removal retried", "session_id", sess.ID,
				"sandbox_id", sess.SandboxID, "profile", prof.Name, "attempts", attempts, "retry_in", retry.String(), "err", err)
			return Destroyed{SessionID: sess.ID, Pending: true, failure: fault.KindOf(classify(err, fault.Provision)), Notice: fmt.Sprintf(
				"the sandbox of session '%s' could not be removed (%s); the session is kept, takes no new work, and the gateway retries the removal until the provider confirms it (next in %s); DELETE it again to retry now",
				sess.ID, why, retry)}, nil
		}
		// Gone meanwhile (another destroy), or its sandbox changed: nothing to keep.
	}
	if sess.ParkedSnapshot != "" {
		// The capture the idle session was parked in goes with it (its user snapshots stay).
		if snap, err := s.store.GetSnapshot(ctx, sess.ParkedSnapshot); err == nil && snap.Kind == store.SnapshotIdle {
			s.dropSnapshot(ctx, prof, snap)
		}
	}
	if err := s.store.DeleteSession(context.WithoutCancel(ctx), sess.ID); err != nil {
		return Destroyed{}, err
	}
	s.sessionIDs.forget(sess.ID)
	return Destroyed{SessionID: sess.ID}, nil
}

// destroyBackend destroys a managed sandbox under the gateway's own identity (seed
// _destroy_backend), bounded to 2 minutes. A sandbox already gone is destroyed; failures are
// logged and returned (callers that forget the sandbox anyway leave it to the orphan sweep).
func (s *Service) destroyBackend(ctx context.Context, prof *Profile, sessionID, sandboxID string) error {
	if sandboxID == "" || prof.Attached() {
		return nil
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	err := s.call(dctx, prof, "destroy", func(ctx context.Context) error { return prof.Provider.Destroy(ctx, sandboxID) })
	if err != nil && fault.KindOf(err) != fault.Gone {
		s.log.Warn("destroying sandbox failed", "session_id", sessionID, "sandbox_id", sandboxID, "profile", prof.Name, "err", err)
		return err
	}
	return nil
}

// lockSession serialises executions and writes of session id in arrival order, in-process and
// across replicas.
func (s *Service) lockSession(ctx context.Context, id string) (func(), error) {
	unlock, err := s.store.LockSession(ctx, id)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, classifyAs(err, fault.Broker, "could not take the session lock")
	}
	return unlock, nil
}

func encodeCursor(t time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t.UnixNano(), 10) + ":" + id))
}

func decodeCursor(c string) (time.Time, string, error) {
	if c == "" {
		return time.Time{}, "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if ts, id, ok := strings.Cut(string(b), ":"); ok {
			if n, err := strconv.ParseInt(ts, 10, 64); err == nil && id != "" {
				return time.Unix(0, n), id, nil
			}
		}
	}
	return time.Time{}, "", fault.New(fault.Validation, "cursor %q is not a next_cursor this API returned; start again without it", c)
}

func idleNotice(prof *Profile, id string) string {
	secs := int(prof.IdleTimeout / time.Second)
	if prof.Attached() {
		return fmt.Sprintf("sandbox session '%s' was idle for more than %ds; its binding was reset and the attached environment was left untouched", id, secs)
	}
	return fmt.Sprintf("sandbox session '%s' was idle for more than %ds and has been reset; its previous workspace state was discarded", id, secs)
}
