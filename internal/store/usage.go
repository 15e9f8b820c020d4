package store

// Held is what a principal holds now (Usage).
type Held struct {
	Sessions   int // default ones included
	Executions int // unfinished tasks that are not background processes
	Background int // unfinished background processes
	// Contexts are the named contexts held in the owner's sessions' current sandboxes
	// (HoldContext).
	Contexts int
	// RetainedOutputBytes is the output its finished tasks keep (Completion.OutputBytes).
	RetainedOutputBytes int64
	Snapshots           int // snapshots of kind SnapshotUser
	// SnapshotBytes is the SizeBytes of all its snapshots, idle captures included.
	SnapshotBytes int64
}

// Session states as Counts reports them.
const (
	// SessionProvisioned: the session holds a sandbox.
	SessionProvisioned = "provisioned"
	// SessionUnprovisioned: no sandbox (not used yet, or freed by an idle reset).
	SessionUnprovisioned = "unprovisioned"
	// SessionDestroyFailed: closed (SessionClosed): destroying its sandbox failed and is
	// retried.
	SessionDestroyFailed = "destroy_failed"
)

// Count is one group of a Counts breakdown.
type Count struct {
	Profile string
	// State is a session state (SessionProvisioned, SessionUnprovisioned,
	// SessionDestroyFailed) or a task status.
	State string
	N     int64
}

// Counts is what the database holds now, for the metrics (docs/semantics.md §14): sessions
// by profile and state, tasks by profile and status (finished ones are kept for
// broker.response_ttl), and the queue's depth — queued executions no worker has started.
type Counts struct {
	Sessions   []Count
	Tasks      []Count
	QueueDepth int64
}
