package sandbox

import (
	"encoding/base64"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// capture keeps a bounded view of one output stream: the first half of its limit and the
// last half (a ring), counting every byte written. Memory is O(limit) however much a program
// prints (field notes: huge output must not exhaust the gateway).
type capture struct {
	mu       sync.Mutex
	headCap  int
	ringSize int
	head     []byte
	ring     []byte // allocated when output first exceeds the head
	pos      int
	full     bool
	total    int64
}

func newCapture(limit int64) *capture {
	if limit < 2 {
		limit = 2
	}
	h := limit / 2
	// Buffers grow with the output: most programs print little, so an execution does not
	// pay for the whole limit up front.
	return &capture{headCap: int(h), ringSize: int(limit - h)}
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	c.total += int64(n)
	if room := c.headCap - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) > 0 && c.ring == nil {
		c.ring = make([]byte, c.ringSize)
	}
	for len(p) > 0 {
		k := copy(c.ring[c.pos:], p)
		p = p[k:]
		c.pos += k
		if c.pos == len(c.ring) {
			c.pos, c.full = 0, true
		}
	}
	return n, nil
}

// Skip counts n bytes the stream had that never reached the capture (a runtime that held the
// execution dropped them from the middle): they count in the total, so the output says it
// was truncated.
func (c *capture) Skip(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > 0 {
		c.total += n
	}
}

// bytes returns the kept output, whether its middle was dropped and, then, how many of its
// bytes are the stream's start (the rest is its end). When truncated, partial UTF-8
// sequences at the cut are trimmed so that text output stays valid.
func (c *capture) bytes() (out []byte, truncated bool, total, headLen int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var tail []byte
	if c.full {
		tail = append(append([]byte{}, c.ring[c.pos:]...), c.ring[:c.pos]...)
	} else {
		tail = append([]byte{}, c.ring[:c.pos]...)
	}
	kept := int64(len(c.head) + len(tail))
	truncated = c.total > kept
	head := c.head
	if truncated {
		head = trimPartialEnd(head)
		tail = trimPartialStart(tail)
	}
	out = make([]byte, 0, len(head)+len(tail))
	out = append(append(out, head...), tail...)
	return out, truncated, c.total, int64(len(head))
}

func trimPartialEnd(b []byte) []byte {
	for i := 1; i <= 3 && i <= len(b); i++ {
		r := b[len(b)-i]
		if utf8.RuneStart(r) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

func trimPartialStart(b []byte) []byte {
	for i := 0; i <= 3 && i < len(b); i++ { // at most 3 continuation bytes precede a start
		if utf8.RuneStart(b[i]) {
			return b[i:]
		}
	}
	if len(b) <= 3 { // nothing but the end of a cut rune
		return b[len(b):]
	}
	return b
}

// encodeStreams renders stdout and stderr as text when both are valid UTF-8 and text was
// asked for; otherwise both as base64 (encoding says which).
func encodeStreams(stdout, stderr []byte, wantBase64 bool) (string, string, string) {
	if !wantBase64 && utf8.Valid(stdout) && utf8.Valid(stderr) {
		return string(stdout), string(stderr), "utf-8"
	}
	return base64.StdEncoding.EncodeToString(stdout), base64.StdEncoding.EncodeToString(stderr), "base64"
}

// outputs capture an execution's two streams (bounded, docs/semantics.md §9 step 7) and feed
// its live output, when it has one, with them and its rich results.
type outputs struct {
	stdout, stderr *capture
	liveOut        *liveWriter
	liveErr        *liveWriter
	liveResults    *liveResults
	limit          int64 // of each stream, and of the results together
}

func (s *Service) newOutputs(live *liveOutput) *outputs {
	o := &outputs{stdout: newCapture(s.maxOutput()), stderr: newCapture(s.maxOutput()), limit: s.maxOutput()}
	if live != nil {
		o.liveOut = &liveWriter{l: live, stream: StreamStdout}
		o.liveErr = &liveWriter{l: live, stream: StreamStderr}
		o.liveResults = &liveResults{l: live, budget: resultBudget{limit: o.limit}}
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
}

// resultOf turns how an execution ended into its Result; a machinery failure is an error.
func (s *Service) resultOf(e ended) (*Result, error) {
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
	res.Results = boundResults(st.Results, e.out.limit)
	out, outTrunc, outN, outHead := e.out.stdout.bytes()
	errb, errTrunc, errN, errHead := e.out.stderr.bytes()
	res.Stdout, res.Stderr, res.Encoding = encodeStreams(out, errb, e.base64)
	res.StdoutBytes, res.StderrBytes, res.StdoutTruncated, res.StderrTruncated = outN, errN, outTrunc, errTrunc
	if outTrunc {
		res.StdoutHead = &outHead
	}
	if errTrunc {
		res.StderrHead = &errHead
	}
	return res, nil
}
