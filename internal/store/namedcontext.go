package store

import "time"

// Context is a named stateful context that a principal holds in a session's sandbox
// (sandbox.quotas.contexts). A row counts while SandboxID is still its session's sandbox.
type Context struct {
	SessionID string
	Name      string
	SandboxID string
	OwnerID   string
	CreatedAt time.Time
}
