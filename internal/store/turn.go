package store

// Place is a place in a session's lock line (docs/semantics.md §9 step 5), taken by
// BeginTask. The zero Place is no place.
type Place struct {
	SessionID string
	Token     string // the holder's handle on its ticket
	Ticket    int64  // the line order
}

// Begun is what BeginTask recorded.
type Begun struct {
	// Place is the task's place in its session's lock line (with lock; else the zero Place).
	Place Place
	// First reports that the task may start now: it was inserted running (without a lock
	// always; with one when its place holds the lock already).
	First bool
	// Session is the session as it was when the place was taken (with lock): when First, as
	// the lock's holder sees it.
	Session Session
}

// Admission is what BeginTask checks before it records a task.
type Admission struct {
	// Limit bounds the owner's unfinished tasks of the task's kind (background processes, or
	// executions; ≤ 0: none).
	Limit int
	// Lock takes a place in the lock line of the task's session, which must exist and take
	// new work: not closed (SessionClosed), and not paused by its owner unless WakesPaused.
	Lock bool
	// WakesPaused admits a session its owner paused: the task's profile resumes it on use
	// (auto_resume). A session the idle sweeper paused is always admitted (its next use
	// resumes it).
	WakesPaused bool
	// Deferred: the caller holds the call until the execution ends or is promoted, so the
	// task row need not be on disk when BeginTask returns — only visible to every replica
	// (Postgres: committed without waiting for the WAL flush). Promoting the task
	// (PromoteTask, a synchronous commit) puts it on disk before anyone else can learn its id;
	// a crash of Postgres before either may lose it (docs/semantics.md §9 "Deferred commits").
	Deferred bool
}
