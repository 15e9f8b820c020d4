package sandbox

import (
	"bytes"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox/execute"
)

// outputs capture an execution's two streams (bounded, docs/semantics.md §9 step 7) and feed
// its live output, when it has one, with them and its rich results.
type outputs struct {
	stdout, stderr *execute.Capture
	liveOut        *liveWriter
	liveErr        *liveWriter
	liveResults    *liveResults
	limit          int64 // of each stream, and of the results together
}

func (xs *executions) newOutputs(live *liveOutput) *outputs {
	s := xs.s
	o := &outputs{stdout: execute.NewCapture(s.cfg.MaxOutputBytes), stderr: execute.NewCapture(s.cfg.MaxOutputBytes), limit: s.cfg.MaxOutputBytes}
	if live != nil {
		o.liveOut = &liveWriter{l: live, stream: StreamStdout}
		o.liveErr = &liveWriter{l: live, stream: StreamStderr}
		o.liveResults = &liveResults{l: live, budget: execute.NewBudget(o.limit)}
	}
	return o
}

// output is the providers.Output that writes to o.
func (o *outputs) output() providers.Output {
	if o.liveOut == nil {
		return providers.Output{Stdout: o.stdout, Stderr: o.stderr}
	}
	return providers.Output{Stdout: teeWriter{o.stdout, o.liveOut}, Stderr: teeWriter{o.stderr, o.liveErr}, ResultFunc: o.liveResults.add}
}

func (o *outputs) flush() {
	if o.liveOut != nil {
		o.liveOut.flush()
		o.liveErr.flush()
	}
}

// ended is how a provider's execution ended, with what the Result needs around it.
type ended struct {
	st        providers.ExitStatus
	err       error
	elapsed   time.Duration
	out       *outputs
	base64    bool
	cancelled bool // the caller cancelled the task
	backstop  bool // the provider's context ended at the timeout + the backstop (guard.go)
	// unanswered: the provider had not returned at the timeout + the grace.
	unanswered bool
	timeout    time.Duration
	sessionID  string
	taskID     string
	notice     string
	warnings   []string
	context    string
	// redact are the session's secrets, whose values are replaced in the kept output.
	redact []providers.SecretBinding
}

// resultOf turns how an execution ended into its Result; a machinery failure is an error.
func (xs *executions) resultOf(e ended) (*Result, error) {
	s := xs.s
	res := &Result{Status: ResultCompleted, SessionID: e.sessionID, TaskID: e.taskID, Notice: e.notice, Warnings: e.warnings, DurationMS: e.elapsed.Milliseconds()}
	if res.Warnings == nil {
		res.Warnings = []string{}
	}
	st, err := e.st, e.err
	switch {
	case err == nil && st.TimedOut:
		res.Status = ResultTimedOut
	case err == nil:
		code := st.ExitCode
		res.ExitCode = &code
		res.Signal = st.Signal
		res.OOMKilled = st.OOMKilled
	case e.cancelled:
		res.Status = ResultCancelled
		if e.unanswered {
			res.Notice = joinNotice(res.Notice, unansweredNotice(e.timeout, s.cfg.ExecGrace))
		}
	case e.backstop, e.unanswered:
		// The provider did not report the end at the timeout: the gateway ended it.
		res.Status = ResultTimedOut
		res.Notice = joinNotice(res.Notice, unansweredNotice(e.timeout, s.cfg.ExecGrace))
	default:
		return nil, classify(err, fault.Provision)
	}
	if err == nil && st.ContextReset {
		res.Notice = joinNotice(res.Notice, fmt.Sprintf("the code context '%s' was lost when the sandbox restarted: this execution ran in a fresh interpreter, without the variables of earlier executions", e.context))
	}
	if err == nil {
		res.Error = st.Error
	}
	if err == nil && st.ContextLost {
		res.ContextLost = true
		// Also after a timeout the program would not yield to: the kill took the context along.
		res.Notice = joinNotice(res.Notice, fmt.Sprintf("the code context '%s' ended during this execution: its variables are gone and the next execution starts a fresh interpreter", e.context))
	}
	res.Results = execute.BoundResults(st.Results, e.out.limit)
	out, outTrunc, outN, outHead := e.out.stdout.Bytes()
	errb, errTrunc, errN, errHead := e.out.stderr.Bytes()
	out, errb = redactSecrets(out, e.redact), redactSecrets(errb, e.redact)
	res.Stdout, res.Stderr, res.Encoding = execute.EncodeStreams(out, errb, e.base64)
	res.StdoutBytes, res.StderrBytes, res.StdoutTruncated, res.StderrTruncated = outN, errN, outTrunc, errTrunc
	if outTrunc {
		res.StdoutHead = &outHead
	}
	if errTrunc {
		res.StderrHead = &errHead
	}
	return res, nil
}

// redactSecrets replaces, in output kept as a task's result, each value of secrets (of at
// least minRedacted bytes) with "[secret NAME]": defence in depth, for a program that got a
// value back from an upstream that echoes it (docs/semantics.md §15). Live output already
// streamed to followers is not rewritten, and a value cut by the output bound is not found.
func redactSecrets(b []byte, secrets []providers.SecretBinding) []byte {
	for _, s := range secrets {
		if len(s.Value) >= minRedacted && bytes.Contains(b, s.Value) {
			b = bytes.ReplaceAll(b, s.Value, []byte("[secret "+s.Name+"]"))
		}
	}
	return b
}

// minRedacted is the shortest value redactSecrets looks for: shorter ones would match
// ordinary output.
const minRedacted = 4
