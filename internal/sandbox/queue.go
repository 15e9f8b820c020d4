package sandbox

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate/internal/broker/queue"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store"
)

// queuedOp is an execution on the queue wire: everything a worker needs, so the request is
// self-sufficient (seed ExecutionRequest).
type queuedOp struct {
	TaskID    string              `json:"task_id"`
	Seq       int64               `json:"seq"`
	SessionID string              `json:"session_id"`
	Ephemeral bool                `json:"ephemeral,omitempty"`
	Profile   string              `json:"profile"`
	Operation string              `json:"operation"`
	Principal principal.Principal `json:"principal"`
	Command   string              `json:"command,omitempty"`
	Code      string              `json:"code,omitempty"`
	Language  string              `json:"language,omitempty"`
	Env       map[string]string   `json:"env,omitempty"`
	Dir       string              `json:"dir,omitempty"`
	Context   string              `json:"context,omitempty"`
	Stdin     []byte              `json:"stdin,omitempty"`
	TimeoutMS int64               `json:"timeout_ms"`
	Base64    bool                `json:"base64,omitempty"`
	Warnings  []string            `json:"warnings,omitempty"`
}

// submitQueued sends an execution to the worker fleet and waits up to wait for its completion
// in Postgres (the response store), else returns the pending task.
func (s *Service) submitQueued(ctx context.Context, j *execJob, wait time.Duration) (Outcome, error) {
	if c := s.cfg.Broker.WorkerTimeoutCeiling; c != nil && j.spec.Timeout.Seconds() > *c {
		return Outcome{}, fault.New(fault.Policy, "the effective timeout %gs of profile '%s' is over sandbox.broker.worker_timeout_ceiling=%gs; lower timeout_s or the profile's policy timeout",
			j.spec.Timeout.Seconds(), j.prof.Name, *c)
	}
	op := queuedOp{
		TaskID: j.task.ID, SessionID: j.sess.ID, Ephemeral: j.ephemeral, Profile: j.prof.Name, Operation: j.task.Operation,
		Principal: j.p, Command: j.spec.Command, Code: j.spec.Code, Language: j.spec.Language, Env: j.spec.Env, Dir: j.spec.Dir,
		Context: j.spec.Context, Stdin: j.stdin, TimeoutMS: j.spec.Timeout.Milliseconds(), Base64: j.base64, Warnings: j.warnings,
	}
	body, err := json.Marshal(op)
	if err != nil {
		return Outcome{}, err
	}
	if limit := s.cfg.Broker.InlinePayloadMaxBytes; limit > 0 && len(body) > limit {
		return Outcome{}, fault.New(fault.TooLarge, "serialized %s request is %d bytes, over sandbox.broker.inline_payload_max_bytes=%d; pass large inputs as files or raise the limit",
			op.Operation, len(body), limit)
	}
	msg := queue.Message{TaskID: op.TaskID, GroupID: op.SessionID, Body: body}
	_, err = s.store.CreateQueuedTask(ctx, j.task, s.executionLimit(j.p), func(ctx context.Context, tx pgx.Tx, seq int64) error {
		if !s.queue.JoinsTransaction() {
			return nil
		}
		return s.queue.Enqueue(ctx, tx, msg)
	})
	if err != nil {
		if errors.Is(err, store.ErrQuota) {
			return Outcome{}, s.executionQuotaErr(j.p)
		}
		return Outcome{}, fault.Wrap(fault.Broker, err, "could not queue the operation")
	}
	if !s.queue.JoinsTransaction() {
		if err := s.queue.Enqueue(ctx, nil, msg); err != nil {
			_, _ = s.store.FinishTask(context.WithoutCancel(ctx), op.TaskID, store.Completion{Status: TaskFailed, Error: "could not queue the operation: " + err.Error(), ErrorType: string(fault.Broker)}, s.now(), s.ttl())
			return Outcome{}, fault.Wrap(fault.Broker, err, "could not queue the operation")
		}
	}
	poll := time.Duration(s.cfg.Broker.WaitPollInterval * float64(time.Second))
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	finished, err := s.watcher.Wait(ctx, op.TaskID, wait, poll)
	if err != nil {
		return Outcome{}, err
	}
	bg := context.WithoutCancel(ctx)
	if !finished {
		if err := s.store.PromoteTask(bg, op.TaskID); err != nil {
			s.log.Error("recording task promotion failed", "task_id", op.TaskID, "err", err)
		}
		t, err := s.GetTask(bg, j.p, op.TaskID)
		if err != nil {
			return Outcome{}, err
		}
		return Outcome{Task: &t}, nil
	}
	t, err := s.GetTask(bg, j.p, op.TaskID)
	if err != nil {
		return Outcome{}, err
	}
	if t.Result != nil {
		return Outcome{Result: t.Result}, nil
	}
	kind := fault.Kind(t.ErrorType)
	if _, known := knownKinds[kind]; !known {
		kind = fault.Broker
	}
	return Outcome{}, fault.New(kind, "%s", t.Error)
}

var knownKinds = map[fault.Kind]struct{}{
	fault.Config: {}, fault.Capability: {}, fault.Policy: {}, fault.Timeout: {}, fault.Provision: {}, fault.Gone: {},
	fault.NotFound: {}, fault.Broker: {}, fault.Validation: {}, fault.Forbidden: {}, fault.Conflict: {}, fault.TooLarge: {},
}

// HandleDelivery runs one queued operation on this worker (seed QueueBrokerWorker request
// loop). It is safe to receive a message more than once: a finished task is acknowledged and
// skipped, a task still running on a live worker is deferred, and a task that has started
// max_receive_count times fails permanently instead of running again. Executions of one
// session start in submission order across the fleet.
func (s *Service) HandleDelivery(ctx context.Context, d queue.Delivery) error {
	var op queuedOp
	if err := json.Unmarshal(d.Body, &op); err != nil {
		s.log.Error("undecodable queued operation dropped", "task_id", d.TaskID, "err", err)
		if d.TaskID != "" {
			_, _ = s.store.FinishTask(ctx, d.TaskID, store.Completion{Status: TaskFailed, Error: "the queued operation could not be decoded: " + err.Error(), ErrorType: string(fault.Broker)}, s.now(), s.ttl())
		}
		return nil
	}
	t, err := s.store.GetTask(ctx, op.TaskID, "")
	if errors.Is(err, store.ErrNotFound) || (err == nil && t.FinishedAt != nil) {
		return nil // expired, cancelled or a duplicate delivery
	}
	if err != nil {
		return err
	}
	// Per-session FIFO: wait (briefly, keeping the message) for earlier operations.
	if !op.Ephemeral {
		deadline := time.Now().Add(2 * time.Second)
		for {
			earlier, err := s.store.EarlierUnfinished(ctx, op.SessionID, t.Seq)
			if err != nil {
				return err
			}
			if !earlier {
				break
			}
			if time.Now().After(deadline) {
				return queue.ErrRetryLater
			}
			d.InProgress()
			time.Sleep(50 * time.Millisecond)
		}
	}
	attempts, err := s.store.BeginAttempt(ctx, op.TaskID, s.runnerID, s.now(), s.now().Add(-s.lostAfter()))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case errors.Is(err, store.ErrTaskHeld):
		// A live worker runs it (the transport offered it again early): look again once
		// that worker could have been declared dead.
		return &queue.RetryError{After: s.lostAfter()}
	case err != nil:
		return err
	}
	if max := s.maxReceive(); attempts > max {
		_, err := s.store.FinishTask(ctx, op.TaskID, store.Completion{
			Status: TaskFailed, ErrorType: string(fault.Broker), SessionID: op.SessionID,
			Error: fmt.Sprintf("sandbox execution failed after %d deliveries (sandbox.broker.queue.max_receive_count=%d): the workers running it stopped before it finished", attempts-1, max),
		}, s.now(), s.ttl())
		return err
	}
	prof, ok := s.profiles[op.Profile]
	if !ok {
		_, err := s.store.FinishTask(ctx, op.TaskID, store.Completion{Status: TaskFailed, ErrorType: string(fault.Config),
			Error: fmt.Sprintf("unknown sandbox profile '%s' on this worker; workers need the gateway's profiles", op.Profile)}, s.now(), s.ttl())
		return err
	}
	sess := store.Session{ID: op.SessionID, OwnerID: op.Principal.ID, Profile: prof.Name, Provider: prof.Provider.Type(), Scope: prof.Config.Scope}
	j := &execJob{
		s: s, p: op.Principal, prof: prof, sess: sess, ephemeral: op.Ephemeral, task: t, stdin: op.Stdin, base64: op.Base64,
		warnings: op.Warnings, queued: true,
		spec: providers.ExecSpec{Command: op.Command, Code: op.Code, Language: op.Language, Env: op.Env, Dir: op.Dir, Context: op.Context, Timeout: time.Duration(op.TimeoutMS) * time.Millisecond},
	}
	if _, err := s.broker.Submit(ctx, op.TaskID, -1, j.run); err != nil {
		return err
	}
	if j.abandoned {
		return errors.New("worker stopping: the operation was interrupted and will be redelivered")
	}
	return nil
}

func (s *Service) maxReceive() int {
	if q := s.cfg.Broker.Queue; q != nil && q.MaxReceiveCount > 0 {
		return q.MaxReceiveCount
	}
	return 3
}

func (s *Service) lostAfter() time.Duration {
	if d := s.cfg.Broker.LostAfter.D(); d > 0 {
		return d
	}
	return 30 * time.Second
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
	// Bisect on the bytes kept per stream: the record is monotone in it.
	render := func(keep int) int {
		o, oc := keepEnds(out, keep, !b64)
		e, ec := keepEnds(errOut, keep, !b64)
		res.Stdout, res.Stderr = encode(o), encode(e)
		res.StdoutTruncated = res.StdoutTruncated || oc
		res.StderrTruncated = res.StderrTruncated || ec
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

// keepEnds keeps at most keep bytes of b: its first and last halves, the middle dropped.
// text keeps UTF-8 sequences whole. cut reports whether anything was dropped.
func keepEnds(b []byte, keep int, text bool) (_ []byte, cut bool) {
	if len(b) <= keep {
		return b, false
	}
	head, tail := b[:keep/2], b[len(b)-(keep-keep/2):]
	if text {
		head, tail = trimPartialEnd(head), trimPartialStart(tail)
	}
	out := make([]byte, 0, len(head)+len(tail))
	return append(append(out, head...), tail...), true
}
