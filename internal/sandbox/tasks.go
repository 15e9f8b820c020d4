package sandbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/store"
)

// Task is a recorded execution as the caller sees it: its row (store.Task: id, session, owner
// id, profile, operation — OpExecuteCode or OpExecuteCommand —, status — TaskPending …
// TaskLost —, Promoted — the call that submitted it stopped waiting and returned the task —,
// times, ExpiresAt — when a finished task is forgotten, sandbox.broker.response_ttl after it
// ended —, notice, Error and ErrorType — a machinery failure, ErrorType a fault kind —,
// program, background process and its PID) with its result decoded.
type Task struct {
	store.Task
	// Result is the finished execution; nil until then, for machinery failures and in
	// listings. It stands for the row's encoded result, which a Task does not carry
	// (Task.Task.Result is nil).
	Result *Result
}

// taskView is t as the caller sees it, its result decoded.
func taskView(t store.Task) (Task, error) {
	v := taskSummary(t)
	if len(t.Result) > 0 {
		v.Result = &Result{}
		if err := json.Unmarshal(t.Result, v.Result); err != nil {
			return Task{}, err
		}
		if v.Result.OutputDropped {
			v.Notice = joinNotice(v.Notice, droppedNotice)
			v.Result.Notice = joinNotice(v.Result.Notice, droppedNotice)
		}
	}
	return v, nil
}

// taskSummary is t without its result (listings).
func taskSummary(t store.Task) Task {
	t.Result = nil
	return Task{Task: t}
}

// ownerFilter is the store's owner filter for p's reads: none for an admin.
func ownerFilter(p principal.Principal) string {
	if p.Admin {
		return ""
	}
	return p.ID
}

// GetTask returns task id if p owns it (admins: any). Unknown, expired or someone else's:
// fault.NotFound.
func (s *Service) GetTask(ctx context.Context, p principal.Principal, id string) (Task, error) {
	t, err := s.store.GetTask(ctx, id, ownerFilter(p))
	if errors.Is(err, store.ErrNotFound) {
		return Task{}, fault.New(fault.NotFound, "unknown sandbox task '%s' (finished tasks are kept for %s)", id, s.cfg.ResponseTTL)
	}
	if err != nil {
		return Task{}, err
	}
	// An API key restricted to other profiles reaches none of this one's tasks.
	if err := keyRefusal(p, t.Profile); err != nil {
		return Task{}, err
	}
	// Results are the session's work: like the session, they need the profile's groups at
	// the time they are read (listing and cancelling stay possible).
	if prof, ok := s.profiles.Lookup(t.Profile); ok && !allowed(p, prof) {
		return Task{}, fault.New(fault.Policy, "sandbox task '%s' ran in profile '%s', which is restricted to members of %v, and this token is in none of them", id, prof.Name, prof.AllowedGroups)
	}
	return taskView(t)
}

// taskSummary is GetTask without the result (Task.Result nil): the same checks, no output
// read.
func (x *executions) taskSummary(ctx context.Context, p principal.Principal, id string) (Task, error) {
	s := x.s
	t, err := s.store.GetTaskSummary(ctx, id, ownerFilter(p))
	if errors.Is(err, store.ErrNotFound) {
		return Task{}, fault.New(fault.NotFound, "unknown sandbox task '%s' (finished tasks are kept for %s)", id, s.cfg.ResponseTTL)
	}
	if err != nil {
		return Task{}, err
	}
	if prof, ok := s.profiles.Lookup(t.Profile); ok && !allowed(p, prof) {
		return Task{}, fault.New(fault.Policy, "sandbox task '%s' ran in profile '%s', which is restricted to members of %v, and this token is in none of them", id, prof.Name, prof.AllowedGroups)
	}
	return taskSummary(t), nil
}

// failureOfTask is the machinery failure a finished task without a result records.
func failureOfTask(t Task) error {
	return fault.New(fault.Kind(cmp.Or(t.ErrorType, string(fault.Internal))), "%s", cmp.Or(t.Error, "the task ended without a result"))
}

// TaskFilter selects tasks.
type TaskFilter struct {
	Status, SessionID string
	// Labels selects the tasks of sessions carrying every one of these labels.
	Labels map[string]string
	Limit  int
	Cursor string
}

// ListTasks returns a page of p's tasks, newest first, without results.
func (s *Service) ListTasks(ctx context.Context, p principal.Principal, f TaskFilter) ([]Task, string, error) {
	t, id, err := decodeCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	rows, err := s.store.ListTasks(ctx, store.TaskFilter{OwnerID: p.ID, Status: f.Status, SessionID: f.SessionID, SessionLabels: f.Labels, Limit: f.Limit + 1, AfterSubmitted: t, AfterID: id})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(rows) > f.Limit {
		rows = rows[:f.Limit]
		last := rows[len(rows)-1]
		next = encodeCursor(last.SubmittedAt, last.ID)
	}
	out := make([]Task, 0, len(rows))
	for _, r := range rows {
		out = append(out, taskSummary(r))
	}
	return out, next, nil
}

// CancelTask stops an unfinished task (its whole process tree) and returns it, waiting a few
// seconds for the runner to confirm. A finished task is returned unchanged.
func (s *Service) CancelTask(ctx context.Context, p principal.Principal, id string) (Task, error) {
	t, err := s.GetTask(ctx, p, id)
	if err != nil || t.FinishedAt != nil {
		return t, err
	}
	if err := s.runs.cancelTask(ctx, p, id, "cancelled by the caller"); err != nil {
		return Task{}, err
	}
	deadline := s.clock.NewTimer(10 * time.Second)
	defer deadline.Stop()
	poll := s.clock.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for {
		if t, err = s.GetTask(ctx, p, id); err != nil || t.FinishedAt != nil {
			return t, err
		}
		select {
		case <-ctx.Done():
			return t, nil
		case <-deadline.C():
			return t, nil
		case <-poll.C():
		}
	}
}

// cancelTask stops task id wherever it runs: here (through the broker), on another replica
// or worker (a flag picked up within a second), or — not started yet on a queue — right away.
func (x *executions) cancelTask(ctx context.Context, p principal.Principal, id, reason string) error {
	s := x.s
	x.cancelMu.Lock()
	x.cancelled[id] = reason
	x.cancelMu.Unlock()
	t, err := s.store.GetTask(ctx, id, "")
	if err == nil && t.Background && t.StartedAt != nil {
		// A running background process is kept by its sandbox, not by a broker: stop it
		// there, from any replica; its follower records the end. (One still starting is also
		// cancelled in the broker below: its job stops it once started.)
		if err := x.stopProcess(ctx, p, t); err != nil {
			s.log.Warn("stopping a background process failed", "task_id", id, "err", err)
		}
	}
	if x.broker.Cancel(id) {
		return nil
	}
	if err := s.store.RequestCancel(ctx, id); err != nil {
		return err
	}
	if err != nil {
		return nil
	}
	if t.Queued && t.Status == TaskPending {
		// A worker receiving it later skips it.
		if _, err := s.store.FinishTask(ctx, id, store.Completion{Status: TaskCancelled, Error: reason + " before it started", ErrorType: "cancelled"}, s.now(), s.cfg.ResponseTTL); err != nil {
			return err
		}
	}
	return nil
}

func (x *executions) wasCancelled(taskID string) bool {
	x.cancelMu.Lock()
	defer x.cancelMu.Unlock()
	return x.cancelled[taskID] != ""
}

// cancelReason says why task taskID was cancelled ("cancelled by the caller", "the session
// was destroyed"): what its completion records as the error.
func (x *executions) cancelReason(taskID string) string {
	x.cancelMu.Lock()
	defer x.cancelMu.Unlock()
	if r := x.cancelled[taskID]; r != "" {
		return r
	}
	return "cancelled by the caller"
}

// forgetCancelled drops the cancel mark of a finished task.
func (x *executions) forgetCancelled(taskID string) {
	x.cancelMu.Lock()
	delete(x.cancelled, taskID)
	x.cancelMu.Unlock()
}

// pollCancels marks and cancels the tasks on this runner whose cancellation was requested
// through another replica (store.RequestCancel); the upkeep room runs it every second.
func (x *executions) pollCancels(ctx context.Context) {
	s := x.s
	ids, err := s.store.CancelRequested(ctx, x.runnerID)
	if err != nil {
		return
	}
	for _, id := range ids {
		x.cancelMu.Lock()
		if x.cancelled[id] == "" {
			x.cancelled[id] = "cancelled by the caller"
		}
		x.cancelMu.Unlock()
		x.broker.Cancel(id)
	}
}
