package store

import "time"

// Snapshot kinds.
const (
	SnapshotUser = "user" // taken by a caller: counts against sandbox.quotas.snapshots and snapshot_bytes
	// SnapshotIdle parks an idle session (idle_action snapshot) until its next use; its size
	// counts in the owner's snapshot bytes, but no limit refuses it.
	SnapshotIdle = "idle"
)

// Snapshot is a persisted capture of a session's sandbox. OwnerID is "" for the idle capture
// of a shared per_runtime session.
type Snapshot struct {
	ID        string
	OwnerID   string
	SessionID string // the session whose sandbox was captured (it may be gone since)
	Profile   string
	Provider  string
	Name      string
	Kind      string // SnapshotUser or SnapshotIdle
	Ref       string // the provider's handle (an image, a folder)
	SizeBytes int64
	CreatedAt time.Time
}

// SnapshotLimits bound what one owner keeps (CreateSnapshotWithin); a limit ≤ 0 is none.
type SnapshotLimits struct {
	Count int   // snapshots of kind SnapshotUser
	Bytes int64 // SizeBytes of all its snapshots, idle captures included
}

// SnapshotFilter selects snapshots for ListSnapshots.
type SnapshotFilter struct {
	OwnerID      string // with All "": every owner's
	All          bool
	SessionID    string
	Limit        int
	AfterCreated time.Time // keyset cursor: strictly older than (AfterCreated, AfterID)
	AfterID      string
}
