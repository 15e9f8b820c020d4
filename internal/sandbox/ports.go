package sandbox

import (
	"context"
	"encoding/json"
	"time"

	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/store"
)

// Store is what the domain keeps in its response store: sessions, tasks and runners, shared
// by every replica and worker. *store.Store (Postgres) implements it; sandboxtest.Store is
// the in-memory one for domain tests; internal/store/storetest checks both against the same
// conformance suite.
//
// Rows are store.Session and store.Task. Errors: store.ErrNotFound for an unknown id (also
// one owned by another principal where an owner is given), store.ErrQuota when an insert
// would go past its limit, store.ErrTaskHeld when a live runner holds a task,
// store.ErrLockHeld when TryExclusive's key is held elsewhere; anything else is the backend
// failing.
type Store interface {
	// Sessions.

	// CreateSessionWithin inserts s unless its owner already has limit sessions, default ones
	// included (limit ≤ 0: no limit). A duplicate id is an error; the owner must be a
	// recorded principal.
	CreateSessionWithin(ctx context.Context, s store.Session, limit int) error
	// EnsureDefaultSession returns the owner's default session of candidate.Profile (the
	// shared one when candidate.OwnerID is ""), inserting candidate when there is none.
	EnsureDefaultSession(ctx context.Context, candidate store.Session) (store.Session, error)
	GetSession(ctx context.Context, id string) (store.Session, error)
	// ListSessions returns the filter's sessions, newest first (created_at, then id).
	ListSessions(ctx context.Context, f store.SessionFilter) ([]store.Session, error)
	// IdleSessions returns up to limit sessions of profile with a sandbox, last used before cutoff.
	IdleSessions(ctx context.Context, profile string, cutoff time.Time, limit int) ([]store.Session, error)
	// UpdateSessionBackend records the session's live sandbox id, status and last use.
	UpdateSessionBackend(ctx context.Context, id, sandboxID, status string, lastUsed time.Time) error
	// TouchSession sets last_used_at = t (never moving it back).
	TouchSession(ctx context.Context, id string, t time.Time) error
	// ResetSession forgets the session's sandbox (only while it is still ifSandbox), sets the
	// notice the next operation reports and restarts it at createdAt; false if it had moved on.
	ResetSession(ctx context.Context, id, notice string, createdAt time.Time, ifSandbox string) (bool, error)
	// ResetIdleSession is ResetSession that also requires last use before cutoff.
	ResetIdleSession(ctx context.Context, id, notice string, createdAt time.Time, ifSandbox string, cutoff time.Time) (bool, error)
	// PauseSession records that the session's sandbox (still ifSandbox, not paused) was paused
	// at at — idle: by the idle sweeper — leaving notice ("" keeps the pending one); false if
	// it had moved on or was paused already.
	PauseSession(ctx context.Context, id, ifSandbox string, at time.Time, idle bool, notice string) (bool, error)
	// ResumeSession records that the session's sandbox is no longer paused.
	ResumeSession(ctx context.Context, id string) error
	// ParkSession forgets the session's sandbox (only while it is still ifSandbox) whose
	// workspace snapshot snapshotID holds, leaving notice; false if it had moved on.
	ParkSession(ctx context.Context, id, ifSandbox, snapshotID, notice string) (bool, error)
	// RestoreSession records sandbox sandboxID, restored from the snapshot the session was
	// parked in, as its sandbox (no longer parked), and a use at lastUsed; its pending notice
	// stays for the next execution.
	RestoreSession(ctx context.Context, id, sandboxID string, lastUsed time.Time) error
	// SandboxInUse reports whether any session refers to sandbox id.
	SandboxInUse(ctx context.Context, id string) (bool, error)
	// DestroyFailed closes session id (store.SessionClosed) after destroying its sandbox
	// sandboxID failed with why, its next attempt due at retryAt; false when it is gone or its
	// sandbox moved on.
	DestroyFailed(ctx context.Context, id, sandboxID, why string, retryAt time.Time) (bool, error)
	// DestroyRetries returns up to limit closed sessions whose next destroy attempt is due.
	DestroyRetries(ctx context.Context, now time.Time, limit int) ([]store.Session, error)
	DeleteSession(ctx context.Context, id string) error
	// SetSessionExpiry sets when session id's lifetime ends (zero: none) and, unless onExpiry
	// is "", what ends it then (store.ExpireDestroy or store.ExpirePause). ErrNotFound for an
	// unknown or closed session.
	SetSessionExpiry(ctx context.Context, id string, at time.Time, onExpiry string) error
	// ExpiredSessions returns up to limit sessions, closed ones aside, whose lifetime ended at
	// now or before, the longest ended first.
	ExpiredSessions(ctx context.Context, now time.Time, limit int) ([]store.Session, error)
	// LockSession waits for the session's lock, granted in arrival order across replicas
	// (docs/semantics.md §9 step 5); unlock releases it.
	LockSession(ctx context.Context, id string) (unlock func(), err error)

	// Tasks.

	// CreateTaskWithin inserts t unless its owner already has limit unfinished tasks
	// (limit ≤ 0: no limit).
	CreateTaskWithin(ctx context.Context, t store.Task, limit int) error
	// BeginTask inserts t within a.Limit and, with a.Lock, takes a place in its session's lock
	// line, in one round trip: the task is running when it may start now (no lock, or the
	// place is first), else pending (AwaitTurn). The place is given up by the completion
	// (Completion.Unlock) or ReleaseTurn. A session that takes no new work (closed, or paused
	// by its owner unless a.WakesPaused): store.ErrRefused, nothing recorded.
	BeginTask(ctx context.Context, t store.Task, a store.Admission) (store.Begun, error)
	// WithdrawTask removes unfinished task id that was never promoted, with its audit event —
	// an execution refused before it started is no task — and reports whether it did.
	WithdrawTask(ctx context.Context, id string) (bool, error)
	// AwaitTurn waits for place's turn, then marks the task running and returns the session.
	AwaitTurn(ctx context.Context, place store.Place, taskID string, now func() time.Time) (store.Session, error)
	// ReleaseTurn gives place up without a completion.
	ReleaseTurn(place store.Place)
	// GetTask returns task id; with ownerID, only that owner's (else ErrNotFound).
	GetTask(ctx context.Context, id, ownerID string) (store.Task, error)
	// GetTaskSummary is GetTask without the result (Result nil).
	GetTaskSummary(ctx context.Context, id, ownerID string) (store.Task, error)
	// ListTasks returns the filter's tasks, newest first, without results.
	ListTasks(ctx context.Context, f store.TaskFilter) ([]store.Task, error)
	StartTask(ctx context.Context, id string, t time.Time) error
	// StartTaskInSession marks task id running and returns its session, in one round trip.
	StartTaskInSession(ctx context.Context, id, sessionID string, t time.Time) (store.Session, error)
	// PromoteTask records that the submitting call stopped waiting.
	PromoteTask(ctx context.Context, id string) error
	// FinishTask records the completion once: false if the task had already finished.
	FinishTask(ctx context.Context, id string, c store.Completion, t time.Time, ttl time.Duration) (bool, error)
	RequestCancel(ctx context.Context, id string) error
	// CancelRequested lists the unfinished tasks of runnerID whose cancel was requested.
	CancelRequested(ctx context.Context, runnerID string) ([]string, error)
	// UnfinishedTasks lists the session's unfinished task ids.
	UnfinishedTasks(ctx context.Context, sessionID string) ([]string, error)
	// OrphanedTasks returns running tasks of runners not seen since staleBefore (to adopt).
	OrphanedTasks(ctx context.Context, staleBefore time.Time, limit int) ([]store.Task, error)
	// AdoptTask makes runnerID the runner of such a task; false when another was first.
	AdoptTask(ctx context.Context, id, runnerID string, staleBefore time.Time) (bool, error)
	// MarkLostTasks finishes as lost the unfinished tasks of runners not seen since staleBefore.
	MarkLostTasks(ctx context.Context, staleBefore, now time.Time, ttl time.Duration) (int64, error)
	DeleteExpiredTasks(ctx context.Context, now time.Time) (int64, error)
	// Usage counts the owner's sessions (default ones included), unfinished executions,
	// unfinished background processes, live named contexts and snapshots of kind
	// store.SnapshotUser, and sums the output bytes its finished tasks keep.
	Usage(ctx context.Context, ownerID string) (store.Held, error)
	// StartedProcess records that background process id started as pid in its sandbox: it
	// no longer holds its session's line, and may be adopted (queued or not).
	StartedProcess(ctx context.Context, id string, pid int) error
	// DropOldestOutputs keeps the newest finished results of the owner whose output bytes
	// (Completion.OutputBytes) fit in keep, merges blank (a JSON object) into the older ones
	// and counts them as keeping no output; it returns how many it changed.
	DropOldestOutputs(ctx context.Context, ownerID string, keep int64, blank json.RawMessage) (int64, error)

	// Contexts (named stateful contexts, for sandbox.quotas.contexts).

	// HoldContext records that c.OwnerID holds context c.Name of session c.SessionID in
	// sandbox c.SandboxID, unless the owner holds limit live contexts besides it (ErrQuota;
	// limit ≤ 0: none). A context counts while its sandbox is its session's. ErrNotFound: no
	// such session.
	HoldContext(ctx context.Context, c store.Context, limit int) error
	// ReleaseContext forgets a context (no error when unknown).
	ReleaseContext(ctx context.Context, sessionID, name string) error
	// DeleteStaleContexts removes the contexts whose sandbox is no longer their session's.
	DeleteStaleContexts(ctx context.Context) (int64, error)

	// Snapshots.

	// CreateSnapshotWithin inserts s unless it is of kind store.SnapshotUser and its owner
	// already has lim.Count such snapshots (store.ErrQuota) or would hold more than lim.Bytes
	// of snapshots with it, idle captures included (store.ErrSnapshotBytes).
	CreateSnapshotWithin(ctx context.Context, s store.Snapshot, lim store.SnapshotLimits) error
	GetSnapshot(ctx context.Context, id string) (store.Snapshot, error)
	// ListSnapshots returns the filter's snapshots, newest first (created_at, then id).
	ListSnapshots(ctx context.Context, f store.SnapshotFilter) ([]store.Snapshot, error)
	// DeleteSnapshot removes snapshot id; false when there was none.
	DeleteSnapshot(ctx context.Context, id string) (bool, error)
	// SigningKey returns the key named name, recording candidate as it when there is none.
	SigningKey(ctx context.Context, name string, candidate []byte, now time.Time) ([]byte, error)

	// Principals.

	// UpsertPrincipal records that (issuer, subject) was seen at now, refreshing its claims,
	// and returns the row with its id and first-seen time.
	UpsertPrincipal(ctx context.Context, p store.Principal, now time.Time) (store.Principal, error)
	// GetPrincipal returns principal id as last recorded (its groups are its latest token's).
	GetPrincipal(ctx context.Context, id string) (store.Principal, error)
	// PrincipalLabel names principal id as "issuer#subject".
	PrincipalLabel(ctx context.Context, id string) (string, error)
	// SeenPrincipal records that principal id was seen at now without changing its claims
	// (last_seen_at never moves back) and returns the row.
	SeenPrincipal(ctx context.Context, id string, now time.Time) (store.Principal, error)

	// API keys (docs/semantics.md §1 API key). Rows are store.APIKey; the gateway's
	// authentication reads them by their secret's hash (store.Store.UseAPIKey), not the domain.

	// CreateAPIKeyWithin inserts k unless its principal already holds limit live keys
	// (neither revoked nor expired at k.CreatedAt; limit ≤ 0: no limit): ErrQuota, nothing
	// inserted. The principal must be a recorded one; a duplicate id or hash is an error.
	CreateAPIKeyWithin(ctx context.Context, k store.APIKey, limit int) error
	GetAPIKey(ctx context.Context, id string) (store.APIKey, error)
	// ListAPIKeys returns the filter's keys, newest first (created_at, then id).
	ListAPIKeys(ctx context.Context, f store.APIKeyFilter) ([]store.APIKey, error)
	// RevokeAPIKey records that principal by revoked key id at at and returns the key; a key
	// revoked before keeps its first revocation.
	RevokeAPIKey(ctx context.Context, id, by string, at time.Time) (store.APIKey, error)
	// DeleteEndedAPIKeys removes the keys that expired or were revoked before cutoff.
	DeleteEndedAPIKeys(ctx context.Context, cutoff time.Time) (int64, error)

	// Audit (docs/semantics.md §14). The statements that insert a task (BeginTask,
	// CreateTaskWithin) also record its execution's audit event (status store.AuditSubmitted,
	// the program's digest, excerpt and size), and those that finish it (FinishTask,
	// MarkLostTasks) complete that event with the final status, exit code and duration — in
	// the same statement, so every execution is audited exactly once.

	// AppendAudit records an event of another kind (file writes and deletions, session
	// creation and destruction); the store sets its id and principal label.
	AppendAudit(ctx context.Context, e store.AuditEvent) error
	// ListAudit returns up to f.Limit events of the filter, newest (highest id) first.
	ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditEvent, error)
	// DeleteAuditBefore removes events older than cutoff, except unfinished executions'.
	DeleteAuditBefore(ctx context.Context, cutoff time.Time) (int64, error)

	// Runners.

	Heartbeat(ctx context.Context, id, hostname string, now time.Time) error
	RemoveRunner(ctx context.Context, id string) error
	DeleteStaleRunners(ctx context.Context, before time.Time) error
	// TryExclusive runs fn while holding key on one replica at a time (ErrLockHeld otherwise).
	TryExclusive(ctx context.Context, key int64, fn func(ctx context.Context) error) error
}

// Spool keeps the completions the Store refused on durable storage until it takes them
// (completion.go; docs/semantics.md §9 Completion): internal/spool, a folder on the
// gateway's disk. A record is opaque bytes under a task id; Put returns once it is durable.
type Spool interface {
	// Put stores record under id (replacing one of the same id); an error when it cannot
	// (full, or the disk failing).
	Put(id string, record []byte) error
	// Get returns record id; an error when there is none.
	Get(id string) ([]byte, error)
	// Remove removes record id (none: no error).
	Remove(id string) error
	// IDs lists the records held.
	IDs() ([]string, error)
	// Dir names the spool in logs.
	Dir() string
}

// Queue is the queue flavor's port (broker.Queued): executions travel to `gateway worker`
// processes and their completions come back through the Store (docs/semantics.md §10 queue).
type Queue interface {
	// Enqueue records t within limit unfinished executions of its owner (store.ErrQuota) and
	// sends env to the fleet, atomically where the transport joins the task's transaction.
	// Errors: fault.TooLarge for an envelope over the inline payload limit, fault.Broker when
	// the transport refuses it.
	Enqueue(ctx context.Context, t store.Task, limit int, env broker.Envelope) error
	// Wait waits up to wait for task id to finish, wherever it runs (wait < 0: until it does).
	Wait(ctx context.Context, id string, wait time.Duration) (finished bool, err error)
	// ResultLimit is the serialized size a result must fit (the transport's message limit),
	// or 0 when results are recorded in the Store only.
	ResultLimit() int
}

var _ Store = (*store.Store)(nil)
