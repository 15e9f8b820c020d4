package sandbox

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/sandgate/sandgate/internal/broker"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store"
)

// submitQueued sends an execution to the worker fleet and waits up to wait for its completion
// in Postgres (the response store), else returns the pending task.
func (s *Service) submitQueued(ctx context.Context, j *execJob, wait time.Duration) (Outcome, error) {
	if c := s.cfg.Queue.WorkerTimeoutCeiling; c > 0 && j.spec.Timeout > c {
		return Outcome{}, fault.New(fault.Policy, "the effective timeout %gs of profile '%s' is over sandbox.broker.worker_timeout_ceiling=%gs; lower timeout_s or the profile's policy timeout",
			j.spec.Timeout.Seconds(), j.prof.Name, c.Seconds())
	}
	env := broker.Envelope{
		TaskID: j.task.ID, SessionID: j.sess.ID, Ephemeral: j.ephemeral, Profile: j.prof.Name, Operation: j.task.Operation,
		Principal: j.p, Command: j.spec.Command, Code: j.spec.Code, Language: j.spec.Language, Env: j.spec.Env, Dir: j.spec.Dir,
		Context: j.spec.Context, Stdin: j.stdin, TimeoutMS: j.spec.Timeout.Milliseconds(), Base64: j.base64, Warnings: j.warnings,
		StdinOpen: j.spec.StdinOpen, Background: j.spec.Background,
	}
	if pty := j.spec.PTY; pty != nil {
		env.PTYRows, env.PTYCols = pty.Rows, pty.Cols
	}
	broker.InjectTrace(ctx, &env)
	if !j.ephemeral {
		// A session that takes no new work refuses before anything is recorded (the thread
		// flavor's BeginTask checks in its insert; a session paused or closed after this
		// read fails the task on the worker instead).
		cur, err := s.store.GetSession(ctx, j.sess.ID)
		switch {
		case errors.Is(err, store.ErrNotFound), err == nil && cur.Status == store.SessionClosed && j.viaDefault:
			return Outcome{}, errSessionGone
		case err != nil:
			return Outcome{}, err
		case cur.Status == store.SessionClosed || !cur.PausedAt.IsZero() && !cur.PausedIdle && !j.prof.AutoResume:
			return Outcome{}, refusedBy(cur)
		}
	}
	limit, overQuota := s.quota.Executions(j.p), s.quota.ExecutionsErr
	if j.task.Background {
		limit, overQuota = s.quota.Background(j.p), s.quota.BackgroundErr
	}
	if err := s.queue.Enqueue(ctx, j.task, limit, env); err != nil {
		if errors.Is(err, store.ErrQuota) {
			return Outcome{}, overQuota(j.p)
		}
		return Outcome{}, err
	}
	if j.started != nil {
		j.started(env.TaskID)
	}
	if j.task.Background {
		return s.awaitQueuedProcess(ctx, j.p, env.TaskID, wait)
	}
	finished, err := s.queue.Wait(ctx, env.TaskID, wait)
	if err != nil {
		return Outcome{}, err
	}
	bg := context.WithoutCancel(ctx)
	if !finished {
		if err := s.store.PromoteTask(bg, env.TaskID); err != nil {
			s.log.Error("recording task promotion failed", "task_id", env.TaskID, "err", err)
		}
		t, err := s.GetTask(bg, j.p, env.TaskID)
		if err != nil {
			return Outcome{}, err
		}
		return Outcome{Task: &t}, nil
	}
	t, err := s.GetTask(bg, j.p, env.TaskID)
	if err != nil {
		return Outcome{}, err
	}
	if t.Result != nil {
		return Outcome{Result: t.Result}, nil
	}
	return Outcome{}, failureOf(t)
}

// awaitQueuedProcess waits up to wait (at least 30 s: the start is the answer) for a queued
// background process to start on a worker, or to fail to, and returns its task.
func (s *Service) awaitQueuedProcess(ctx context.Context, p principal.Principal, id string, wait time.Duration) (Outcome, error) {
	deadline := s.clock.NewTimer(max(wait, 30*time.Second))
	defer deadline.Stop()
	for expired := false; ; {
		t, err := s.GetTask(context.WithoutCancel(ctx), p, id)
		if err != nil {
			return Outcome{}, err
		}
		switch {
		case t.FinishedAt != nil && t.Result == nil:
			return Outcome{}, failureOf(t)
		case t.PID > 0 || t.FinishedAt != nil || expired:
			return Outcome{Task: &t}, nil
		}
		poll := s.clock.NewTimer(s.cfg.Queue.WaitPoll / 5)
		select {
		case <-ctx.Done():
			poll.Stop()
			return Outcome{Task: &t}, nil
		case <-deadline.C():
			expired = true // read once more, then answered as it stands
		case <-poll.C():
		}
		poll.Stop()
	}
}

// failureOf is the fault of task t that finished without a result. The one quota a worker
// can meet — the other quotas are checked when the task is recorded — is the contexts quota
// (contextquota.go), so a quota failure carries its Retry-After.
func failureOf(t Task) error {
	kind := fault.Kind(t.ErrorType)
	if kind == fault.Quota {
		return fault.OverQuota(contextRetry, "%s", t.Error)
	}
	if _, known := knownKinds[kind]; !known {
		kind = fault.Broker
	}
	return fault.New(kind, "%s", t.Error)
}

var knownKinds = map[fault.Kind]struct{}{
	fault.Config: {}, fault.Capability: {}, fault.Policy: {}, fault.Timeout: {}, fault.Provision: {}, fault.Gone: {},
	fault.NotFound: {}, fault.Broker: {}, fault.Unavailable: {}, fault.Validation: {}, fault.Forbidden: {}, fault.Conflict: {}, fault.TooLarge: {},
	fault.Paused: {},
}

// RunDelivered runs one queued operation on this worker: broker.Queued admitted the delivery
// (deduplication, per-session order, the attempts cap) and t is its task. An error asks for
// redelivery: the run was interrupted because this worker is stopping.
func (s *Service) RunDelivered(ctx context.Context, env broker.Envelope, t store.Task) error {
	prof, ok := s.profiles.Lookup(env.Profile)
	if !ok {
		_, err := s.store.FinishTask(ctx, env.TaskID, store.Completion{Status: TaskFailed, ErrorType: string(fault.Config),
			Error: fmt.Sprintf("unknown sandbox profile '%s' on this worker; workers need the gateway's profiles", env.Profile)}, s.now(), s.ttl())
		return err
	}
	sess := store.Session{ID: env.SessionID, OwnerID: env.Principal.ID, Profile: prof.Name, Provider: prof.Provider.Type(), Scope: prof.Scope}
	j := &execJob{
		s: s, p: env.Principal, prof: prof, sess: sess, ephemeral: env.Ephemeral, task: t, stdin: env.Stdin, base64: env.Base64,
		warnings: env.Warnings, queued: true, parent: trace.SpanContextFromContext(broker.ExtractTrace(ctx, env)),
		spec: providers.ExecSpec{Command: env.Command, Code: env.Code, Language: env.Language, Env: env.Env, Dir: env.Dir, Context: env.Context,
			Timeout: time.Duration(env.TimeoutMS) * time.Millisecond, StdinOpen: env.StdinOpen, Background: env.Background},
	}
	if env.PTYRows > 0 && env.PTYCols > 0 {
		j.spec.PTY = &providers.TermSize{Rows: env.PTYRows, Cols: env.PTYCols}
	}
	run := j.run
	if env.Background {
		// Started here and followed here until it ends; the delivery is done once it runs.
		j.live = s.kept.start(t.ID)
		run = j.startProcess
	}
	if _, err := s.broker.Submit(ctx, env.TaskID, -1, run); err != nil {
		return err
	}
	if j.abandoned {
		return errors.New("worker stopping: the operation was interrupted and will be redelivered")
	}
	return nil
}

// trimToRecord makes res fit a serialized record of at most limit bytes (a transport's hard
// message limit; see queue.ResultLimiter), keeping what fits of each stream as the capture
// does — its head and its tail, the middle dropped, *_truncated set and the total byte counts
// unchanged — and never emptying a stream that had output while other fields fit. The longer
// stream gives up bytes first. Base64 streams are cut in their decoded bytes and re-encoded;
// text is cut on UTF-8 boundaries.
func trimToRecord(res *Result, limit int) {
	if limit <= 0 {
		return
	}
	size := func() int { b, _ := json.Marshal(res); return len(b) }
	if size() <= limit {
		return
	}
	// Rich results go first, the largest first, each whole (kept as dropped, named).
	for dropped := false; size() > limit; {
		i := -1
		for j, r := range res.Results {
			if r.Dropped == nil && (i < 0 || r.Size() > res.Results[i].Size()) {
				i = j
			}
		}
		if i < 0 {
			break
		}
		res.Results[i] = (&resultBudget{}).take(res.Results[i]) // a budget of 0 drops it
		if !dropped {
			dropped = true
			res.Notice = joinNotice(res.Notice, fmt.Sprintf("rich results dropped to fit the %d-byte record limit of the queue transport; save charts and tables to files to keep them", limit))
		}
	}
	if size() <= limit {
		return
	}
	note := fmt.Sprintf("output cut to its head and tail to fit the %d-byte record limit of the queue transport; redirect output to a file to keep all of it", limit)
	if res.Notice != "" {
		res.Notice += "; " + note
	} else {
		res.Notice = note
	}
	b64 := res.Encoding == "base64"
	decode := func(s string) []byte {
		if b64 {
			if d, err := base64.StdEncoding.DecodeString(s); err == nil {
				return d
			}
		}
		return []byte(s)
	}
	encode := func(b []byte) string {
		if b64 {
			return base64.StdEncoding.EncodeToString(b)
		}
		return string(b)
	}
	out, errOut := decode(res.Stdout), decode(res.Stderr)
	outHead, errHead := headOf(res.StdoutTruncated, res.StdoutHead, len(out)), headOf(res.StderrTruncated, res.StderrHead, len(errOut))
	// Bisect on the bytes kept per stream: the record is monotone in it.
	render := func(keep int) int {
		o, oh, oc := keepEnds(out, outHead, keep, !b64)
		e, eh, ec := keepEnds(errOut, errHead, keep, !b64)
		res.Stdout, res.Stderr = encode(o), encode(e)
		res.StdoutTruncated = res.StdoutTruncated || oc
		res.StderrTruncated = res.StderrTruncated || ec
		res.StdoutHead, res.StderrHead = splitAt(oh), splitAt(eh)
		return size()
	}
	wasOut, wasErr := res.StdoutTruncated, res.StderrTruncated
	lo, hi := 0, max(len(out), len(errOut))
	for lo < hi {
		mid := (lo + hi + 1) / 2
		res.StdoutTruncated, res.StderrTruncated = wasOut, wasErr
		if render(mid) <= limit {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	res.StdoutTruncated, res.StderrTruncated = wasOut, wasErr
	render(lo)
}

// Head splits of keepEnds besides a byte count: a whole stream, and a truncated one whose
// split is not known (a result stored before splits were recorded).
const (
	wholeStream  = -1
	unknownSplit = -2
)

// headOf is the head split of a stream's n kept bytes (Result.StdoutHead): wholeStream,
// unknownSplit, or how many of them are the stream's start.
func headOf(truncated bool, head *int64, n int) int {
	switch {
	case !truncated:
		return wholeStream
	case head == nil:
		return unknownSplit
	}
	return int(min(max(*head, 0), int64(n)))
}

// splitAt is Result.StdoutHead for keepEnds's head split h.
func splitAt(h int) *int64 {
	if h < 0 {
		return nil
	}
	v := int64(h)
	return &v
}

// keepEnds keeps at most keep bytes of b: its first and last halves, the middle dropped.
// head is b's split (headOf): when known, the first head bytes of b are its stream's start
// and the rest its end, and each half comes from its own part, so every byte kept stays
// where it was in the stream (the end gives way first). text keeps UTF-8 sequences whole.
// It returns the bytes, their split, and whether anything was dropped.
func keepEnds(b []byte, head, keep int, text bool) (_ []byte, headLen int, cut bool) {
	if len(b) <= keep {
		return b, head, false
	}
	headN, tailN := keep/2, keep-keep/2
	if head >= 0 {
		tailN = min(tailN, len(b)-head)
		headN = min(head, keep-tailN)
	}
	h, t := b[:headN], b[len(b)-tailN:]
	if text {
		h, t = trimPartialEnd(h), trimPartialStart(t)
	}
	out := make([]byte, 0, len(h)+len(t))
	headLen = len(h)
	if head == unknownSplit {
		headLen = unknownSplit
	}
	return append(append(out, h...), t...), headLen, true
}
