package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store"
)

// Background processes (docs/semantics.md §9 "Background processes"): a command started with
// ExecInput.Background is a task like any execution — owned, listed, followed (Follow),
// cancelled — that takes its place in its session's line to start, gives the line up once it
// runs, and is then followed to its end by this replica (or, once this one stopped, by the
// replica that adopts it). While it runs it counts as use of its session (the idle timeout
// never frees a sandbox under it) and against the principal's background_processes quota,
// not concurrent_executions. It ends when its program does, when it is stopped (DELETE, task
// cancel), or with its session.

// startProcess is the job of a background process: turn, sandbox, start, then the line is
// given up and watchProcess follows it. A process that could not start is completed here.
func (j *execJob) startProcess(ctx context.Context) {
	s := j.s
	defer j.reply()
	bg := context.WithoutCancel(ctx)
	info, sb, err := j.start(ctx)
	if err != nil {
		j.err = err
		c := failedCompletion(err)
		cancelled := s.runs.wasCancelled(j.req.Task.ID)
		if cancelled {
			c.Status, c.ErrorType, c.Error = TaskCancelled, "cancelled", "cancelled by the caller before it started"
		}
		// A refused start is no process: its caller, who waits for the start, gets the
		// refusal and no task stays.
		if !isRefusal(err) || cancelled || !j.withdraw(bg) {
			c.SessionID, c.Unlock = j.sess.ID, j.place
			s.runs.recordCompletion(bg, j.req.Task.ID, c)
		}
		s.runs.forgetCancelled(j.req.Task.ID)
		if j.live != nil {
			j.live.finish(nil, err)
		}
		return
	}
	if err := s.store.StartedProcess(bg, j.req.Task.ID, info.PID); err != nil {
		s.log.Warn("recording a started background process failed", "task_id", j.req.Task.ID, "err", err)
	}
	if j.place.Token != "" {
		s.store.ReleaseTurn(j.place) // the session's next operation may start
	}
	if ctx.Err() != nil || s.runs.wasCancelled(j.req.Task.ID) {
		// Cancelled while it started: stop it; watchProcess records how it ended.
		_ = sb.(providers.Executions).Stop(bg, j.req.Task.ID)
	}
	t := j.req.Task
	t.PID, t.SessionID = info.PID, j.sess.ID
	s.runs.watchProcess(t, j.prof, sb, j.live)
}

// start takes the job's turn in its session's line, readies the sandbox and starts the
// program. On success the returned handle stays open for watchProcess.
func (j *execJob) start(ctx context.Context) (providers.ProcessInfo, providers.Sandbox, error) {
	l, err := j.lease(ctx)
	if err != nil {
		return providers.ProcessInfo{}, nil, err
	}
	defer l.Release() // queued deliveries: the lock taken for the start only
	x, ok := l.Sandbox.(providers.Executions)
	if !ok {
		return providers.ProcessInfo{}, nil, fault.Unsupported(j.prof.Provider.Type(), "background")
	}
	spec := j.withStdin(j.spec)
	spec.ID = j.req.Task.ID
	info, err := x.Start(ctx, spec)
	if errors.Is(err, providers.ErrUnreached) && ctx.Err() == nil {
		if err = j.renew(ctx, l); err != nil {
			return providers.ProcessInfo{}, nil, err
		}
		if x, ok = l.Sandbox.(providers.Executions); !ok {
			return providers.ProcessInfo{}, nil, fault.Unsupported(j.prof.Provider.Type(), "background")
		}
		info, err = x.Start(ctx, spec)
	}
	if err != nil {
		return providers.ProcessInfo{}, nil, classify(err, fault.Provision)
	}
	if n := joinNotice(l.Notice, l.Healed); n != "" && j.live != nil {
		j.live.notice = n
	}
	return info, l.Keep(), nil
}

// watchProcess follows background process t in sandbox sb to its end, in the background, and
// records its completion; it touches the session while the process runs (it counts as use).
// It closes sb. When this gateway stops meanwhile it leaves the task running: another replica
// (or this one, started again) adopts it.
func (xs *executions) watchProcess(t store.Task, prof *Profile, sb providers.Sandbox, live *liveOutput) {
	xs.adopting.Add(1)
	go func() {
		defer xs.adopting.Done()
		defer func() { _ = sb.Close() }()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-xs.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		go xs.keepTouched(ctx, t.SessionID, prof.IdleTimeout)
		xs.followToEnd(ctx, t, sb, live, "", func(why string) {
			xs.recordCompletion(ctx, t.ID, store.Completion{Status: TaskLost, ErrorType: "lost", SessionID: t.SessionID,
				Error: "the background process was lost: " + why})
		})
	}()
}

// keepTouched records a use of session id every third of idle (at most every minute) until
// ctx ends: a running background process counts as use.
func (xs *executions) keepTouched(ctx context.Context, id string, idle time.Duration) {
	s := xs.s
	every := min(max(idle/3, time.Second), time.Minute)
	tick := s.clock.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
			if err := s.store.TouchSession(ctx, id, s.now()); err != nil && ctx.Err() == nil {
				s.log.Warn("recording a background process's use of its session failed", "session_id", id, "err", err)
			}
		}
	}
}

// followToEnd follows execution t, kept by sandbox sb, to its end and records its
// completion (with notice), or calls lost with the reason it cannot be followed; the output
// goes to live, which it finishes. When ctx ends first (this gateway stops) nothing is
// recorded: the task is left for another runner to adopt.
func (xs *executions) followToEnd(ctx context.Context, t store.Task, sb providers.Sandbox, live *liveOutput, notice string, lost func(why string)) {
	s := xs.s
	r, ok := sb.(providers.Reattacher)
	if !ok {
		live.finish(nil, fault.New(fault.Capability, "the sandbox does not keep executions"))
		lost("its sandbox's provider does not keep executions for a gateway to follow")
		return
	}
	if live.notice != "" {
		notice = joinNotice(live.notice, notice)
	}
	out := xs.newOutputs(live)
	start := s.now()
	st, err := r.Reattach(ctx, t.ID, out.output())
	out.flush()
	if ctx.Err() != nil {
		live.finish(nil, ctx.Err())
		return // shutting down: left for the next adopter
	}
	defer xs.forgetCancelled(t.ID)
	if fault.KindOf(err) == fault.NotFound {
		live.finish(nil, err)
		lost("its sandbox no longer holds the execution (the sandbox restarted or was removed, or the execution ended long before)")
		return
	}
	completion := store.Completion{SessionID: t.SessionID, Touch: true}
	res, err := xs.resultOf(ended{st: st, err: err, elapsed: s.since(start), out: out,
		// Stopped, or cut off because its sandbox went with a destroyed session: either way
		// a cancellation, not a provider failure.
		cancelled: errors.Is(err, providers.ErrExecutionStopped) || err != nil && xs.wasCancelled(t.ID),
		sessionID: t.SessionID, taskID: t.ID, notice: notice})
	if err != nil {
		completion.Status, completion.Error, completion.ErrorType = TaskFailed, err.Error(), string(fault.KindOf(err))
	} else {
		completeWith(&completion, res, fmt.Sprintf("sandbox operation '%s' exceeded its timeout", t.Operation), xs.cancelReason(t.ID))
	}
	live.noteDropped(&completion, res)
	xs.recordCompletion(ctx, t.ID, completion)
	live.finish(res, err)
}

// stopProcess stops background process t in its sandbox, wherever it is followed; the
// follower records how it ended. A process that is not (or no longer) kept there is not an
// error.
func (xs *executions) stopProcess(ctx context.Context, p principal.Principal, t store.Task) error {
	x, done, err := xs.executionsOf(ctx, p, t)
	if err != nil {
		return err
	}
	defer done()
	if err := x.Stop(ctx, t.ID); err != nil && fault.KindOf(err) != fault.NotFound {
		return classify(err, fault.Provision)
	}
	return nil
}

// executionsOf attaches to the sandbox of task t's session, for p, as a keeper of
// executions; done closes the handle. Errors: fault.NotFound when the session or its sandbox
// is gone, fault.Capability when its provider keeps no executions, the attach's.
func (xs *executions) executionsOf(ctx context.Context, p principal.Principal, t store.Task) (providers.Executions, func(), error) {
	s := xs.s
	prof := s.profiles.Get(t.Profile)
	if prof == nil {
		return nil, nil, fault.New(fault.NotFound, "task '%s' ran in profile '%s', which this gateway does not serve", t.ID, t.Profile)
	}
	gone := fault.New(fault.NotFound, "the sandbox of task '%s' is gone", t.ID)
	sess, err := s.store.GetSession(ctx, t.SessionID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil, gone
	}
	if err != nil {
		return nil, nil, err
	}
	order := orderNone // its sandbox as it is (a parked session runs nothing)
	if !sess.PausedAt.IsZero() {
		order = orderIfParked // woken (or fault.Paused)
	}
	l, err := s.leases().lease(ctx, p, prof, sess, leaseOpts{order: order, reach: reachAttach})
	switch {
	case fault.KindOf(err) == fault.Paused:
		return nil, nil, err
	case fault.KindOf(err) == fault.NotFound, fault.KindOf(err) == fault.Gone, err == nil && l.Sandbox == nil:
		return nil, nil, gone
	case err != nil:
		return nil, nil, err
	}
	sb := l.Keep()
	x, ok := sb.(providers.Executions)
	if !ok {
		_ = sb.Close()
		return nil, nil, fault.Unsupported(prof.Provider.Type(), "interactive")
	}
	return x, func() { _ = sb.Close() }, nil
}

// inputWait bounds how long WriteStdin and Resize wait for an execution to start in its
// sandbox (it may wait for its turn in the session's line first).
const inputWait = 30 * time.Second

// WriteStdin sends in to the standard input of task id — an execution started with
// ExecInput.StdinOpen or a PTY — as it reads it, from any replica, and closes that input
// afterwards with eof; it returns the bytes the program's input took. A task still waiting
// for its turn is waited for (at most 30 s).
//
// Errors: fault.NotFound as GetTask, or when the sandbox no longer keeps the execution;
// fault.Conflict when the task has finished, or its execution takes no input (started
// without stdin_open or pty, or its input was closed); fault.Capability when its provider
// keeps no executions; fault.Policy as GetTask.
func (s *Service) WriteStdin(ctx context.Context, p principal.Principal, id string, in io.Reader, eof bool) (int64, error) {
	var n int64
	err := s.runs.withExecution(ctx, p, id, func(x providers.Executions) error {
		var err error
		n, err = x.WriteStdin(ctx, id, in, eof)
		return err
	})
	return n, err
}

// Resize sets the terminal size of task id, an execution started with ExecInput.PTY.
// Errors: WriteStdin's; fault.Conflict when it has no terminal; fault.Validation for a size
// outside 1 to 1000.
func (s *Service) Resize(ctx context.Context, p principal.Principal, id string, size TermSize) error {
	if size.Rows < 1 || size.Cols < 1 || size.Rows > 1000 || size.Cols > 1000 {
		return fault.New(fault.Validation, "a terminal needs rows and cols from 1 to 1000")
	}
	return s.runs.withExecution(ctx, p, id, func(x providers.Executions) error {
		return x.Resize(ctx, id, providers.TermSize{Rows: size.Rows, Cols: size.Cols})
	})
}

// endedMeanwhile is the Conflict for task id when its execution ended while an input was
// being given to it (the program exited as the write or resize reached it, and the task's
// completion is being recorded): nil while it still runs.
func (xs *executions) endedMeanwhile(ctx context.Context, id string) error {
	s := xs.s
	for range 20 {
		t, err := s.store.GetTask(ctx, id, "")
		if err != nil {
			return nil
		}
		if t.FinishedAt != nil {
			return fault.New(fault.Conflict, "task '%s' has finished (%s): it takes no input", id, t.Status)
		}
		if !sleep(ctx, s.clock, 50*time.Millisecond) {
			return nil
		}
	}
	return nil
}

// withExecution runs fn on the sandbox that keeps task id's execution, once the task runs;
// fn's fault.NotFound while the task is still unfinished means the execution has not reached
// its sandbox yet, and fn is tried again (until inputWait).
func (xs *executions) withExecution(ctx context.Context, p principal.Principal, id string, fn func(providers.Executions) error) error {
	s := xs.s
	deadline := s.clock.NewTimer(inputWait)
	defer deadline.Stop()
	for expired := false; ; {
		if _, err := s.GetTask(ctx, p, id); err != nil {
			return err
		}
		t, err := s.store.GetTask(ctx, id, "")
		if err != nil {
			return classifyAs(err, fault.Broker, "could not read the task")
		}
		if !t.Interactive {
			return fault.New(fault.Conflict, "task '%s' was started without stdin_open or pty: its standard input is not open", id)
		}
		if t.FinishedAt != nil {
			return fault.New(fault.Conflict, "task '%s' has finished (%s): it takes no input", id, t.Status)
		}
		err = nil
		if t.StartedAt != nil {
			x, done, aerr := xs.executionsOf(ctx, p, t)
			if aerr != nil && fault.KindOf(aerr) != fault.NotFound {
				return aerr
			}
			if aerr == nil {
				err = fn(x)
				done()
				if err == nil {
					return nil
				}
				if fault.KindOf(err) != fault.NotFound {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					if ended := xs.endedMeanwhile(ctx, id); ended != nil {
						return ended
					}
					return classify(err, fault.Provision)
				}
			}
		}
		if expired {
			if err != nil {
				return err
			}
			return fault.New(fault.Conflict, "task '%s' has not started in its sandbox within %s: it waits for its turn in the session; try again", id, inputWait)
		}
		poll := s.clock.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			poll.Stop()
			return ctx.Err()
		case <-deadline.C():
			expired = true // tried once more, then answered
		case <-poll.C():
		}
		poll.Stop()
	}
}

// ListProcesses returns the background processes of session id that p may see — running
// ones and those that ended within broker.response_ttl — newest first.
// Errors: those of GetSession.
func (s *Service) ListProcesses(ctx context.Context, p principal.Principal, id, profile string) ([]Task, error) {
	sess, _, _, err := s.sessions.Lookup(ctx, p, id, profile)
	if err != nil {
		return nil, err
	}
	rows, err := s.store.ListTasks(ctx, store.TaskFilter{OwnerID: ownerFilter(p), SessionID: sess.ID, Background: true, Limit: 1000})
	if err != nil {
		return nil, err
	}
	out := make([]Task, 0, len(rows))
	for _, r := range rows {
		out = append(out, taskSummary(r))
	}
	return out, nil
}

// GetProcess returns background process pid (its task id) of session id.
// Errors: fault.NotFound for an unknown session, or a task that is not one of its
// background processes; those of GetTask.
func (s *Service) GetProcess(ctx context.Context, p principal.Principal, id, profile, pid string) (Task, error) {
	sess, _, _, err := s.sessions.Lookup(ctx, p, id, profile)
	if err != nil {
		return Task{}, err
	}
	t, err := s.GetTask(ctx, p, pid)
	if fault.KindOf(err) == fault.NotFound || err == nil && (t.SessionID != sess.ID || !t.Background) {
		return Task{}, fault.New(fault.NotFound, "session '%s' has no background process '%s' (ended ones are kept for %s)", sess.ID, pid, s.cfg.ResponseTTL)
	}
	return t, err
}

// StopProcess stops background process pid of session id (its whole process tree) and
// returns it once it ended (waiting a few seconds). One that ended is returned as it is.
// Errors: GetProcess's.
func (s *Service) StopProcess(ctx context.Context, p principal.Principal, id, profile, pid string) (Task, error) {
	if _, err := s.GetProcess(ctx, p, id, profile, pid); err != nil {
		return Task{}, err
	}
	return s.CancelTask(ctx, p, pid)
}
