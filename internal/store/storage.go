package store

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"
)

// Store is the response store the domain (internal/sandbox) keeps its state in: sessions,
// tasks and runners, shared by every replica and worker. It is composed of one interface per
// kind of row, so a collaborator can ask for only what it uses (the principal recorder takes
// Principals).
//
// Errors: ErrNotFound for an unknown id (also one owned by another principal where an owner
// is given), ErrQuota when an insert would go past its limit, ErrTaskHeld when a live runner
// holds a task, ErrLockHeld when TryExclusive's key is held elsewhere; anything else is the
// backend failing.
type Store interface {
	Sessions
	Tasks
	Contexts
	Snapshots
	Principals
	APIKeys
	Secrets
	AuditLog
	Runners
}

// Sessions are the session rows and their lock (docs/semantics.md §8, §9 step 5).
type Sessions interface {
	// CreateSessionWithin inserts s unless its owner already has limit sessions, default ones
	// included (limit ≤ 0: no limit). A duplicate id is an error; the owner must be a
	// recorded principal.
	CreateSessionWithin(ctx context.Context, s Session, limit int) error
	// EnsureDefaultSession returns the owner's default session of candidate.Profile (the
	// shared one when candidate.OwnerID is ""), inserting candidate when there is none.
	EnsureDefaultSession(ctx context.Context, candidate Session) (Session, error)
	GetSession(ctx context.Context, id string) (Session, error)
	// ListSessions returns the filter's sessions, newest first (created_at, then id).
	ListSessions(ctx context.Context, f SessionFilter) ([]Session, error)
	// IdleSessions returns up to limit sessions of profile with a sandbox, last used before cutoff.
	IdleSessions(ctx context.Context, profile string, cutoff time.Time, limit int) ([]Session, error)
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
	// SessionOfSandbox returns the session whose sandbox is sandboxID (ErrNotFound for none;
	// "" is nobody's): whom an event a provider reports about a sandbox concerns.
	SessionOfSandbox(ctx context.Context, sandboxID string) (Session, error)
	// DestroyFailed closes session id (SessionClosed) after destroying its sandbox sandboxID
	// failed with why, its next attempt due at retryAt; false when it is gone or its sandbox
	// moved on.
	DestroyFailed(ctx context.Context, id, sandboxID, why string, retryAt time.Time) (bool, error)
	// DestroyRetries returns up to limit closed sessions whose next destroy attempt is due.
	DestroyRetries(ctx context.Context, now time.Time, limit int) ([]Session, error)
	DeleteSession(ctx context.Context, id string) error
	// SetSessionExpiry sets when session id's lifetime ends (zero: none) and, unless onExpiry
	// is "", what ends it then (ExpireDestroy or ExpirePause). ErrNotFound for an unknown or
	// closed session.
	SetSessionExpiry(ctx context.Context, id string, at time.Time, onExpiry string) error
	// EditSession changes session id's name and labels: edit gets the session as it stands
	// (its row locked until the call returns, so concurrent edits apply one after the other)
	// and changes s.Name and s.Labels; the other fields it changes are not written. It returns
	// the session as it then stands. ErrNotFound for an unknown session; an error of edit is
	// returned as it is and nothing is written.
	EditSession(ctx context.Context, id string, edit func(s *Session) error) (Session, error)
	// ExpiredSessions returns up to limit sessions, closed ones aside, whose lifetime ended at
	// now or before, the longest ended first.
	ExpiredSessions(ctx context.Context, now time.Time, limit int) ([]Session, error)
	// LockSession waits for the session's lock, granted in arrival order across replicas
	// (docs/semantics.md §9 step 5); unlock releases it.
	LockSession(ctx context.Context, id string) (unlock func(), err error)
}

// Tasks are the executions' rows (docs/semantics.md §9): their admission, their place in
// their session's lock line, their completion, and what their owners hold.
type Tasks interface {
	// CreateTaskWithin inserts t unless its owner already has limit unfinished tasks
	// (limit ≤ 0: no limit).
	CreateTaskWithin(ctx context.Context, t Task, limit int) error
	// BeginTask inserts t within a.Limit and, with a.Lock, takes a place in its session's lock
	// line, in one round trip: the task is running when it may start now (no lock, or the
	// place is first), else pending (AwaitTurn). The place is given up by the completion
	// (Completion.Unlock) or ReleaseTurn. A session that takes no new work (closed, or paused
	// by its owner unless a.WakesPaused): ErrRefused, nothing recorded.
	BeginTask(ctx context.Context, t Task, a Admission) (Begun, error)
	// WithdrawTask removes unfinished task id that was never promoted, with its audit event —
	// an execution refused before it started is no task — and reports whether it did.
	WithdrawTask(ctx context.Context, id string) (bool, error)
	// AwaitTurn waits for place's turn, then marks the task running and returns the session.
	AwaitTurn(ctx context.Context, place Place, taskID string, now func() time.Time) (Session, error)
	// ReleaseTurn gives place up without a completion.
	ReleaseTurn(place Place)
	// GetTask returns task id; with ownerID, only that owner's (else ErrNotFound).
	GetTask(ctx context.Context, id, ownerID string) (Task, error)
	// GetTaskSummary is GetTask without the result (Result nil).
	GetTaskSummary(ctx context.Context, id, ownerID string) (Task, error)
	// ListTasks returns the filter's tasks, newest first, without results.
	ListTasks(ctx context.Context, f TaskFilter) ([]Task, error)
	StartTask(ctx context.Context, id string, t time.Time) error
	// StartTaskInSession marks task id running and returns its session, in one round trip.
	StartTaskInSession(ctx context.Context, id, sessionID string, t time.Time) (Session, error)
	// PromoteTask records that the submitting call stopped waiting.
	PromoteTask(ctx context.Context, id string) error
	// FinishTask records the completion once: false if the task had already finished.
	FinishTask(ctx context.Context, id string, c Completion, t time.Time, ttl time.Duration) (bool, error)
	RequestCancel(ctx context.Context, id string) error
	// CancelRequested lists the unfinished tasks of runnerID whose cancel was requested.
	CancelRequested(ctx context.Context, runnerID string) ([]string, error)
	// UnfinishedTasks lists the session's unfinished task ids.
	UnfinishedTasks(ctx context.Context, sessionID string) ([]string, error)
	// OrphanedTasks returns running tasks of runners not seen since staleBefore (to adopt).
	OrphanedTasks(ctx context.Context, staleBefore time.Time, limit int) ([]Task, error)
	// AdoptTask makes runnerID the runner of such a task; false when another was first.
	AdoptTask(ctx context.Context, id, runnerID string, staleBefore time.Time) (bool, error)
	// MarkLostTasks finishes as lost the unfinished tasks of runners not seen since staleBefore.
	MarkLostTasks(ctx context.Context, staleBefore, now time.Time, ttl time.Duration) (int64, error)
	DeleteExpiredTasks(ctx context.Context, now time.Time) (int64, error)
	// Usage counts the owner's sessions (default ones included), unfinished executions,
	// unfinished background processes, live named contexts and snapshots of kind
	// SnapshotUser, and sums the output bytes its finished tasks keep.
	Usage(ctx context.Context, ownerID string) (Held, error)
	// StartedProcess records that background process id started as pid in its sandbox: it
	// no longer holds its session's line, and may be adopted (queued or not).
	StartedProcess(ctx context.Context, id string, pid int) error
	// DropOldestOutputs keeps the newest finished results of the owner whose output bytes
	// (Completion.OutputBytes) fit in keep, merges blank (a JSON object) into the older ones
	// and counts them as keeping no output; it returns how many it changed.
	DropOldestOutputs(ctx context.Context, ownerID string, keep int64, blank json.RawMessage) (int64, error)
}

// Contexts are the named stateful contexts principals hold (sandbox.quotas.contexts).
type Contexts interface {
	// HoldContext records that c.OwnerID holds context c.Name of session c.SessionID in
	// sandbox c.SandboxID, unless the owner holds limit live contexts besides it (ErrQuota;
	// limit ≤ 0: none). A context counts while its sandbox is its session's. ErrNotFound: no
	// such session.
	HoldContext(ctx context.Context, c Context, limit int) error
	// ReleaseContext forgets a context (no error when unknown).
	ReleaseContext(ctx context.Context, sessionID, name string) error
	// DeleteStaleContexts removes the contexts whose sandbox is no longer their session's.
	DeleteStaleContexts(ctx context.Context) (int64, error)
}

// Snapshots are the captures of sessions' sandboxes, and the keys that sign preview links.
type Snapshots interface {
	// CreateSnapshotWithin inserts s unless it is of kind SnapshotUser and its owner already
	// has lim.Count such snapshots (ErrQuota) or would hold more than lim.Bytes of snapshots
	// with it, idle captures included (ErrSnapshotBytes).
	CreateSnapshotWithin(ctx context.Context, s Snapshot, lim SnapshotLimits) error
	GetSnapshot(ctx context.Context, id string) (Snapshot, error)
	// ListSnapshots returns the filter's snapshots, newest first (created_at, then id).
	ListSnapshots(ctx context.Context, f SnapshotFilter) ([]Snapshot, error)
	// DeleteSnapshot removes snapshot id; false when there was none.
	DeleteSnapshot(ctx context.Context, id string) (bool, error)
	// SigningKey returns the key named name, recording candidate as it when there is none.
	SigningKey(ctx context.Context, name string, candidate []byte, now time.Time) ([]byte, error)
}

// Principals are the callers' recorded identities.
type Principals interface {
	// UpsertPrincipal records that (issuer, subject) was seen at now, refreshing its claims,
	// and returns the row with its id and first-seen time.
	UpsertPrincipal(ctx context.Context, p Principal, now time.Time) (Principal, error)
	// GetPrincipal returns principal id as last recorded (its groups are its latest token's).
	GetPrincipal(ctx context.Context, id string) (Principal, error)
	// PrincipalLabel names principal id as "issuer#subject".
	PrincipalLabel(ctx context.Context, id string) (string, error)
	// SeenPrincipal records that principal id was seen at now without changing its claims
	// (last_seen_at never moves back) and returns the row.
	SeenPrincipal(ctx context.Context, id string, now time.Time) (Principal, error)
}

// Secrets are the principals' secrets (issue 39), kept sealed (store.Secret).
type Secrets interface {
	// PutSecretWithin inserts s, or replaces the hosts, key, sealed value and updated time of
	// its owner's secret of the same name (keeping its created time); inserting is refused
	// with ErrQuota when the owner already holds limit secrets (limit ≤ 0: no limit). created
	// says which it did. The owner must be a recorded principal.
	PutSecretWithin(ctx context.Context, s Secret, limit int) (created bool, err error)
	// GetSecret returns owner's secret name; ErrNotFound when it has none of that name.
	GetSecret(ctx context.Context, owner, name string) (Secret, error)
	// ListSecrets returns owner's secrets, by name.
	ListSecrets(ctx context.Context, owner string) ([]Secret, error)
	// DeleteSecret removes owner's secret name; ErrNotFound when it has none of that name.
	DeleteSecret(ctx context.Context, owner, name string) error
	// SecretsSealedWithout returns up to limit secrets (any owner's) not sealed under keyID,
	// for re-sealing them under it.
	SecretsSealedWithout(ctx context.Context, keyID string, limit int) ([]Secret, error)
	// ResealSecret replaces the key and sealed value of owner's secret name while it is still
	// sealed under fromKey (false, nil when it no longer is, or is gone).
	ResealSecret(ctx context.Context, owner, name, fromKey, keyID string, sealed []byte) (bool, error)
}

// APIKeys are the API keys principals made (docs/semantics.md §1 API key), as the domain
// manages them. The gateway's authentication reads a key by its secret's hash with the
// Postgres store's UseAPIKey, which is no part of this interface: only the composition root
// calls it.
type APIKeys interface {
	// CreateAPIKeyWithin inserts k unless its principal already holds limit live keys
	// (neither revoked nor expired at k.CreatedAt; limit ≤ 0: no limit): ErrQuota, nothing
	// inserted. The principal must be a recorded one; a duplicate id or hash is an error.
	CreateAPIKeyWithin(ctx context.Context, k APIKey, limit int) error
	GetAPIKey(ctx context.Context, id string) (APIKey, error)
	// ListAPIKeys returns the filter's keys, newest first (created_at, then id).
	ListAPIKeys(ctx context.Context, f APIKeyFilter) ([]APIKey, error)
	// RevokeAPIKey records that principal by revoked key id at at and returns the key; a key
	// revoked before keeps its first revocation.
	RevokeAPIKey(ctx context.Context, id, by string, at time.Time) (APIKey, error)
	// DeleteEndedAPIKeys removes the keys that expired or were revoked before cutoff.
	DeleteEndedAPIKeys(ctx context.Context, cutoff time.Time) (int64, error)
}

// AuditLog is the audit log (docs/semantics.md §14). The statements that insert a task
// (BeginTask, CreateTaskWithin, Queue.CreateQueuedTask) also record its execution's audit
// event (status AuditSubmitted, the program's digest, excerpt and size), and those that
// finish it (FinishTask, MarkLostTasks) complete that event with the final status, exit code
// and duration — in the same statement, so every execution is audited exactly once.
type AuditLog interface {
	// AppendAudit records an event of another kind (file writes and deletions, session
	// creation and destruction); the store sets its id and principal label.
	AppendAudit(ctx context.Context, e AuditEvent) error
	// ListAudit returns up to f.Limit events of the filter, newest (highest id) first.
	ListAudit(ctx context.Context, f AuditFilter) ([]AuditEvent, error)
	// DeleteAuditBefore removes events older than cutoff, except unfinished executions'.
	DeleteAuditBefore(ctx context.Context, cutoff time.Time) (int64, error)
}

// Runners are the gateway replicas and workers that run tasks, by their heartbeats, and the
// locks that let one of them at a time sweep.
type Runners interface {
	Heartbeat(ctx context.Context, id, hostname string, now time.Time) error
	RemoveRunner(ctx context.Context, id string) error
	DeleteStaleRunners(ctx context.Context, before time.Time) error
	// TryExclusive runs fn while holding key on one replica at a time (ErrLockHeld otherwise).
	TryExclusive(ctx context.Context, key int64, fn func(ctx context.Context) error) error
}

// Queue is what the queue flavor (internal/broker.Queued) records beyond Tasks, on the
// gateways that enqueue executions and on the workers that run them (docs/semantics.md §10
// queue). The Postgres store implements it; the in-memory store does not (queued executions
// need a store every process of the fleet shares).
type Queue interface {
	// CreateQueuedTask inserts t as a queued task, within limit unfinished tasks of its
	// owner's of t's kind (ErrQuota; limit ≤ 0: none), and calls enqueue in the same
	// transaction: both happen or neither does. It returns the task's seq.
	CreateQueuedTask(ctx context.Context, t Task, limit int, enqueue EnqueueFunc) (int64, error)
	// BeginAttempt claims unfinished task id for runnerID and counts one more started
	// execution, returning the count. A task running on this runner, or on another whose
	// heartbeat is newer than staleBefore, is not taken (ErrTaskHeld); a finished one:
	// ErrNotFound.
	BeginAttempt(ctx context.Context, id, runnerID string, now, staleBefore time.Time) (int, error)
	// EarlierUnfinished reports whether session sessionID has an unfinished task submitted
	// before seq (per-session order across the fleet); a started background process no
	// longer holds the line.
	EarlierUnfinished(ctx context.Context, sessionID string, seq int64) (bool, error)
	GetTask(ctx context.Context, id, ownerID string) (Task, error)
	FinishTask(ctx context.Context, id string, c Completion, t time.Time, ttl time.Duration) (bool, error)
	// WatchTasks returns a watcher of task completions made by any process; its Run must be
	// running for it to hear of them before the poll interval of a Wait.
	WatchTasks(log *slog.Logger) TaskWatcher
}

// EnqueueFunc is work that commits with a queued task's row (Queue.CreateQueuedTask): tx is
// the store's transaction inserting it — the Postgres store's is a pgx.Tx — for a queue
// transport that keeps its messages in the same database to join; seq is the task's
// submission order. An error rolls the insert back.
type EnqueueFunc func(ctx context.Context, tx any, seq int64) error

// TaskWatcher tells waiters when a task finishes, on whichever process finished it.
type TaskWatcher interface {
	// Run listens for completions until ctx ends.
	Run(ctx context.Context)
	// Wait blocks until task id has finished, wait has passed, or ctx ends, and reports
	// whether it finished; poll is how often it reads the store when it hears nothing.
	// ErrNotFound: no such task.
	Wait(ctx context.Context, id string, wait, poll time.Duration) (bool, error)
}
