package memory

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/store"
)

func copyTask(r *store.Task) store.Task {
	t := *r
	t.StartedAt, t.FinishedAt, t.ExpiresAt = tsPtr(r.StartedAt), tsPtr(r.FinishedAt), tsPtr(r.ExpiresAt)
	t.Result = bytes.Clone(r.Result)
	return t
}

// unfinished counts owner's unfinished tasks of a kind (background processes, or
// executions). Call with mu held.
func (s *Store) unfinished(owner string, background bool) int {
	n := 0
	for _, t := range s.tasks {
		if t.OwnerID == owner && t.FinishedAt == nil && t.Background == background {
			n++
		}
	}
	return n
}

// CreateTaskWithin inserts t unless its owner already has limit unfinished tasks (limit ≤
// 0: no limit), then store.ErrQuota. As the Postgres insert, it stores only the id, session,
// owner, profile, operation, status, runner and submission time; the task gets the next seq
// (submission order) and is neither promoted, started, finished nor queued.
func (s *Store) CreateTaskWithin(ctx context.Context, t store.Task, limit int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	owner, err := uuidText(t.OwnerID)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if limit > 0 && s.unfinished(owner, t.Background) >= limit {
		return store.ErrQuota
	}
	s.seq++ // the bigserial advances even when the insert then fails on a constraint
	if _, dup := s.tasks[t.ID]; dup {
		return uniqueViolation{"tasks_pkey"}
	}
	if _, err := s.owner("tasks", owner); err != nil {
		return err
	}
	s.tasks[t.ID] = &store.Task{
		ID: t.ID, SessionID: t.SessionID, OwnerID: owner, Profile: t.Profile, Operation: t.Operation,
		Status: t.Status, RunnerID: t.RunnerID, SubmittedAt: ts(t.SubmittedAt), Seq: s.seq,
		Program: store.ProgramOf(t.Program), Background: t.Background, Interactive: t.Interactive,
	}
	s.auditTask(s.tasks[t.ID], t.Program, t.APIKeyID)
	return nil
}

// BeginTask inserts task t within a.Limit as CreateTaskWithin does — running, started at
// t.SubmittedAt, without lock — and with a.Lock also takes a place in session t.SessionID's
// line (the session must exist: else store.ErrNotFound; and take new work: else
// store.ErrRefused with the session) and returns the session; the task is running when the
// place is first, else pending. Nothing is inserted on an error.
func (s *Store) BeginTask(ctx context.Context, t store.Task, a store.Admission) (store.Begun, error) {
	limit, lock := a.Limit, a.Lock
	if err := ctx.Err(); err != nil {
		return store.Begun{}, err
	}
	owner, err := uuidText(t.OwnerID)
	if err != nil {
		return store.Begun{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var sess *store.Session
	if lock {
		if sess = s.sessions[t.SessionID]; sess == nil {
			return store.Begun{}, store.ErrNotFound
		}
		if sess.Status == store.SessionClosed || !sess.PausedAt.IsZero() && !sess.PausedIdle && !a.WakesPaused {
			return store.Begun{Session: copySession(sess)}, store.ErrRefused
		}
	}
	if limit > 0 && s.unfinished(owner, t.Background) >= limit {
		return store.Begun{}, store.ErrQuota
	}
	s.seq++
	if _, dup := s.tasks[t.ID]; dup {
		return store.Begun{}, uniqueViolation{"tasks_pkey"}
	}
	if _, err := s.owner("tasks", owner); err != nil {
		return store.Begun{}, err
	}
	begun := store.Begun{First: true}
	if lock {
		tk := &ticket{granted: make(chan struct{}), token: newUUID()}
		begun.First = s.enqueue(t.SessionID, tk)
		s.lockSeq++
		begun.Place = store.Place{SessionID: t.SessionID, Token: tk.token, Ticket: s.lockSeq}
		begun.Session = copySession(sess)
	}
	row := &store.Task{
		ID: t.ID, SessionID: t.SessionID, OwnerID: owner, Profile: t.Profile, Operation: t.Operation,
		Status: "pending", RunnerID: t.RunnerID, SubmittedAt: ts(t.SubmittedAt), Seq: s.seq,
		Program: store.ProgramOf(t.Program), Background: t.Background, Interactive: t.Interactive,
	}
	if begun.First {
		started := ts(t.SubmittedAt)
		row.Status, row.StartedAt = "running", &started
	}
	s.tasks[t.ID] = row
	s.deferred[t.ID] = DeferredWrites{Row: a.Deferred}
	s.auditTask(row, t.Program, t.APIKeyID)
	return begun, nil
}

// WithdrawTask removes unfinished, never promoted task id and its audit event, and wakes
// WaitTask; it reports whether it did.
func (s *Store) WithdrawTask(ctx context.Context, id string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.tasks[id]
	if !ok || r.FinishedAt != nil || r.Promoted {
		return false, nil
	}
	delete(s.tasks, id)
	delete(s.deferred, id)
	delete(s.outputs, id)
	delete(s.processes, id)
	s.audit = slices.DeleteFunc(s.audit, func(e store.AuditEvent) bool { return e.TaskID == id })
	s.notify()
	return true, nil
}

// GetTask returns task id — with ownerID, only if ownerID owns it — or store.ErrNotFound.
func (s *Store) GetTask(ctx context.Context, id, ownerID string) (store.Task, error) {
	if err := ctx.Err(); err != nil {
		return store.Task{}, err
	}
	owner := ""
	if ownerID != "" {
		u, err := uuidText(ownerID)
		if err != nil {
			return store.Task{}, err
		}
		owner = u
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.tasks[id]
	if !ok || (owner != "" && r.OwnerID != owner) {
		return store.Task{}, store.ErrNotFound
	}
	return copyTask(r), nil
}

// GetTaskSummary is GetTask without the result (not even copied).
func (s *Store) GetTaskSummary(ctx context.Context, id, ownerID string) (store.Task, error) {
	if err := ctx.Err(); err != nil {
		return store.Task{}, err
	}
	owner := ""
	if ownerID != "" {
		u, err := uuidText(ownerID)
		if err != nil {
			return store.Task{}, err
		}
		owner = u
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.tasks[id]
	if !ok || (owner != "" && r.OwnerID != owner) {
		return store.Task{}, store.ErrNotFound
	}
	t := *r
	t.Result = nil
	return copyTask(&t), nil
}

// ListTasks returns the owner's tasks, filtered, newest first (submitted_at, then id,
// descending), after the keyset cursor, at most f.Limit of them, without their results.
func (s *Store) ListTasks(ctx context.Context, f store.TaskFilter) ([]store.Task, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkLimit(f.Limit); err != nil {
		return nil, err
	}
	owner := ""
	if f.OwnerID != "" {
		var err error
		if owner, err = uuidText(f.OwnerID); err != nil {
			return nil, err
		}
	}
	after := ts(f.AfterSubmitted)
	s.mu.Lock()
	defer s.mu.Unlock()
	var rows []*store.Task
	for _, r := range s.tasks {
		switch {
		case owner != "" && r.OwnerID != owner:
		case f.Background && !r.Background:
		case f.Status != "" && r.Status != f.Status:
		case f.SessionID != "" && r.SessionID != f.SessionID:
		case len(f.SessionLabels) > 0 && (s.sessions[r.SessionID] == nil || !hasLabels(s.sessions[r.SessionID].Labels, f.SessionLabels)):
		case f.AfterID != "" && !before(r.SubmittedAt, r.ID, after, f.AfterID):
		default:
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b *store.Task) int { return newestFirst(a.SubmittedAt, a.ID, b.SubmittedAt, b.ID) })
	out := []store.Task{}
	for _, r := range rows[:min(len(rows), f.Limit)] {
		t := copyTask(r)
		t.Result = nil
		out = append(out, t)
	}
	return out, nil
}

// StartTask marks task id running at t, unless it finished already.
func (s *Store) StartTask(ctx context.Context, id string, t time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start(id, t)
	return nil
}

// start is StartTask's UPDATE. Call with mu held.
func (s *Store) start(id string, t time.Time) {
	if r, ok := s.tasks[id]; ok && r.FinishedAt == nil {
		at := ts(t)
		r.Status, r.StartedAt = "running", &at
	}
}

// StartTaskInSession is StartTask followed by GetSession(sessionID) in one step: the task is
// started also when the session is gone (store.ErrNotFound).
func (s *Store) StartTaskInSession(ctx context.Context, id, sessionID string, t time.Time) (store.Session, error) {
	if err := ctx.Err(); err != nil {
		return store.Session{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start(id, t)
	r, ok := s.sessions[sessionID]
	if !ok {
		return store.Session{}, store.ErrNotFound
	}
	return copySession(r), nil
}

// PromoteTask marks task id promoted (finished or not).
func (s *Store) PromoteTask(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.tasks[id]; ok {
		r.Promoted = true
	}
	return nil
}

// FinishTask records task id's completion at t, kept until t+ttl, unless it finished before
// (then false and the first completion stays). With c.Touch and c.SessionID, session
// c.SessionID's last use moves to t — as in Postgres, whether or not this completion was
// the one stored.
func (s *Store) FinishTask(ctx context.Context, id string, c store.Completion, t time.Time, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	var res []byte
	if c.Result != nil {
		var err error
		if res, err = json.Marshal(c.Result); err != nil {
			return false, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finishFailures > 0 {
		s.finishFailures--
		return false, ErrUnavailable
	}
	if c.Touch && c.SessionID != "" {
		if r, ok := s.sessions[c.SessionID]; ok {
			r.LastUsedAt = later(r.LastUsedAt, ts(t))
		}
	}
	if tk := s.placeTicket(c.Unlock); tk != nil {
		s.releaseLocked(c.Unlock.SessionID, tk)
	}
	r, ok := s.tasks[id]
	if !ok || r.FinishedAt != nil && !(c.ReplacesLost && r.Status == "lost" && c.Status != "lost") {
		return false, nil
	}
	finished, expires := ts(t), ts(t.Add(ttl))
	r.Status, r.Notice, r.Error, r.ErrorType, r.Result = c.Status, c.Notice, c.Error, c.ErrorType, res
	r.FinishedAt, r.ExpiresAt = &finished, &expires
	d := s.deferred[id]
	d.Completion = c.Deferred
	s.deferred[id] = d
	delete(s.outputs, id)
	if c.OutputBytes > 0 {
		s.outputs[id] = c.OutputBytes
	}
	s.finishAudit(id, c.Status, c.ErrorType, c.ExitCode, c.DurationMS, r.StartedAt, finished)
	s.notify()
	return true, nil
}

// RequestCancel flags unfinished task id for cancellation.
func (s *Store) RequestCancel(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.tasks[id]; ok && r.FinishedAt == nil {
		r.CancelRequested = true
	}
	return nil
}

// CancelRequested lists runnerID's unfinished tasks flagged for cancellation (in submission
// order; Postgres gives no order).
func (s *Store) CancelRequested(ctx context.Context, runnerID string) ([]string, error) {
	return s.taskIDs(ctx, func(t *store.Task) bool { return t.RunnerID == runnerID && t.CancelRequested })
}

// UnfinishedTasks lists session sessionID's unfinished tasks in submission order.
func (s *Store) UnfinishedTasks(ctx context.Context, sessionID string) ([]string, error) {
	return s.taskIDs(ctx, func(t *store.Task) bool { return t.SessionID == sessionID })
}

// taskIDs lists the ids of unfinished tasks that match, by seq.
func (s *Store) taskIDs(ctx context.Context, match func(*store.Task) bool) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var rows []*store.Task
	for _, t := range s.tasks {
		if t.FinishedAt == nil && match(t) {
			rows = append(rows, t)
		}
	}
	slices.SortFunc(rows, func(a, b *store.Task) int { return cmp.Compare(a.Seq, b.Seq) })
	ids := []string{}
	for _, t := range rows {
		ids = append(ids, t.ID)
	}
	return ids, nil
}

// OrphanedTasks returns up to limit running, unfinished tasks — not queued, unless a started
// background process — whose runner has no heartbeat since staleBefore, oldest start first.
func (s *Store) OrphanedTasks(ctx context.Context, staleBefore time.Time, limit int) ([]store.Task, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	staleBefore = ts(staleBefore)
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []store.Task
	for _, t := range s.tasks {
		if t.FinishedAt == nil && t.StartedAt != nil && (!t.Queued || s.processes[t.ID]) && !s.alive(t.RunnerID, staleBefore) {
			out = append(out, copyTask(t))
		}
	}
	slices.SortFunc(out, func(a, b store.Task) int {
		if c := a.StartedAt.Compare(*b.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// AdoptTask makes runnerID the runner of unfinished task id whose runner is stale.
func (s *Store) AdoptTask(ctx context.Context, id, runnerID string, staleBefore time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	staleBefore = ts(staleBefore)
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[id]
	if !ok || t.FinishedAt != nil || s.alive(t.RunnerID, staleBefore) {
		return false, nil
	}
	t.RunnerID = runnerID
	return true, nil
}

// MarkLostTasks finishes as lost, at now and kept until now+ttl, every unfinished task —
// pending ones too — whose runner has no heartbeat since staleBefore or is unknown, and
// returns how many.
func (s *Store) MarkLostTasks(ctx context.Context, staleBefore, now time.Time, ttl time.Duration) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	staleBefore = ts(staleBefore)
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, t := range s.tasks {
		if t.FinishedAt != nil || t.Queued && !s.processes[t.ID] || s.alive(t.RunnerID, staleBefore) {
			continue
		}
		finished, expires := ts(now), ts(now.Add(ttl))
		t.Status, t.ErrorType, t.FinishedAt, t.ExpiresAt = "lost", "lost", &finished, &expires
		t.Error = "the gateway process running this task stopped before it finished (runner " + t.RunnerID + "); its outcome is unknown"
		if t.StartedAt == nil {
			t.Error = "the gateway process holding this task stopped before it started (runner " + t.RunnerID + "); it never ran: submit it again"
		}
		s.finishAudit(t.ID, "lost", "lost", nil, nil, t.StartedAt, finished)
		n++
	}
	if n > 0 {
		s.notify()
	}
	return n, nil
}

// DeleteExpiredTasks removes the tasks that expired before now.
func (s *Store) DeleteExpiredTasks(ctx context.Context, now time.Time) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now = ts(now)
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for id, t := range s.tasks {
		if t.ExpiresAt != nil && t.ExpiresAt.Before(now) {
			delete(s.tasks, id)
			delete(s.deferred, id)
			delete(s.processes, id)
			delete(s.outputs, id)
			n++
		}
	}
	if n > 0 {
		s.notify()
	}
	return n, nil
}

// Usage counts ownerID's sessions (its default ones included; shared ones are nobody's),
// unfinished executions, unfinished background processes and live contexts, and sums the
// output bytes its finished tasks keep.
func (s *Store) Usage(ctx context.Context, ownerID string) (store.Held, error) {
	if err := ctx.Err(); err != nil {
		return store.Held{}, err
	}
	owner, err := uuidText(ownerID)
	if err != nil {
		return store.Held{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return store.Held{
		Sessions: s.ownedSessions(owner), Executions: s.unfinished(owner, false), Background: s.unfinished(owner, true),
		Contexts: s.liveContexts(owner, contextKey{}), RetainedOutputBytes: s.retained(owner), Snapshots: s.ownedSnapshots(owner),
		SnapshotBytes: s.snapshotBytes(owner),
	}, nil
}

// StartedProcess records background process id's pid (negative: 0) and that it started.
func (s *Store) StartedProcess(ctx context.Context, id string, pid int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tasks[id]; ok && t.Background {
		t.PID = max(pid, 0)
		s.processes[id] = true
	}
	return nil
}

// WaitTask waits until task id has finished (or is gone) and returns it: a test's way to
// follow a promoted task without polling. Errors: store.ErrNotFound for an unknown task,
// ctx.Err() when ctx ends first.
func (s *Store) WaitTask(ctx context.Context, id string) (store.Task, error) {
	for {
		s.mu.Lock()
		r, ok := s.tasks[id]
		changed := s.changed
		var t store.Task
		if ok {
			t = copyTask(r)
		}
		s.mu.Unlock()
		switch {
		case !ok:
			return store.Task{}, store.ErrNotFound
		case t.FinishedAt != nil:
			return t, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return store.Task{}, ctx.Err()
		}
	}
}
