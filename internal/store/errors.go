package store

import (
	"errors"
	"fmt"
)

// The store's errors. Every implementation returns these (wrapped or not: test with
// errors.Is); anything else is the backend failing.

// ErrNotFound is returned when a row does not exist (or is not visible to the caller).
var ErrNotFound = errors.New("store: not found")

// ErrQuota is returned when an insert would take its owner past the given limit.
var ErrQuota = errors.New("store: over quota")

// ErrSnapshotBytes is CreateSnapshotWithin's refusal over SnapshotLimits.Bytes; it is also
// ErrQuota (errors.Is).
var ErrSnapshotBytes = fmt.Errorf("%w: snapshot bytes", ErrQuota)

// ErrRefused is BeginTask's error for a session that takes no new work as it stands (closed,
// or paused by its owner): nothing was recorded, and Begun.Session says why.
var ErrRefused = errors.New("store: the session takes no new work")

// ErrTaskHeld is returned by BeginAttempt when a live runner is executing the task.
var ErrTaskHeld = errors.New("store: task is running on a live runner")

// ErrLockHeld is returned by TryExclusive when another replica holds the lock.
var ErrLockHeld = errors.New("store: lock held elsewhere")
