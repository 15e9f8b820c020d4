package store

import "time"

// Session is a persisted sandbox session. OwnerID is "" for a per_runtime shared session.
type Session struct {
	ID            string
	OwnerID       string
	Profile       string
	Provider      string
	Scope         string
	Name          string
	Labels        map[string]string
	IsDefault     bool
	SandboxID     string
	Status        string
	PendingNotice string
	CreatedAt     time.Time
	LastUsedAt    time.Time
	// PausedAt is when the session's sandbox was paused; zero while it is not.
	PausedAt time.Time
	// PausedIdle says the idle sweeper paused it (idle_action pause): the next use resumes it.
	PausedIdle bool
	// ParkedSnapshot is the snapshot the session's workspace was parked in while it has no
	// sandbox (idle_action snapshot); the next use restores it. "" for none.
	ParkedSnapshot string
	// DestroyAttempts counts the failed attempts to destroy the sandbox of a closed session
	// (Status SessionClosed), DestroyRetryAt is when the next is due and DestroyError is the
	// provider's last answer (DestroyFailed); zero for a session that is not closed.
	DestroyAttempts int
	DestroyRetryAt  time.Time
	DestroyError    string
	// ExpiresAt is when the session's lifetime ends (zero: it has none); OnExpiry says what
	// ends it then, ExpireDestroy or ExpirePause (ExpiredSessions).
	ExpiresAt time.Time
	OnExpiry  string
	// Env is the session's environment: variables every program of the session gets (an
	// execution's own win). Never nil once read.
	Env map[string]string
	// CPU (cores) and MemoryMB (MiB) are what the session asked for its sandboxes, within its
	// profile's policy; 0: the profile's.
	CPU      float64
	MemoryMB int
	// Secrets are the secrets bound to the session (issue 39): name → the placeholder its
	// sandbox sees in place of the value. Set when the session is made. Never nil once read.
	Secrets map[string]string
}

// What ends a session whose lifetime passed (Session.OnExpiry).
const (
	ExpireDestroy = "destroy" // the session and its sandbox go
	ExpirePause   = "pause"   // its sandbox is paused and its lifetime cleared
)

// Session statuses.
const (
	// SessionActive: the session takes work.
	SessionActive = "active"
	// SessionClosed: destroying the session's sandbox failed; the row stays, takes no new
	// work, is no longer a default nor a shared session, and waits for its sandbox's removal
	// (DestroyFailed, DestroyRetries).
	SessionClosed = "closed"
)

// SessionFilter selects sessions for ListSessions.
type SessionFilter struct {
	OwnerID      string // "" with All: every session
	All          bool
	Profile      string
	Status       string
	Conversation string
	// Labels selects the sessions carrying every one of these labels (key and value).
	Labels       map[string]string
	Limit        int
	AfterCreated time.Time // keyset cursor: strictly older than (AfterCreated, AfterID)
	AfterID      string
}
