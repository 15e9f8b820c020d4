package sandbox

import (
	"cmp"
	"context"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/outlog"
	"github.com/sandgate/sandgate/internal/principal"
)

// Streams of OutputEvent.Stream.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// liveRetention is how long a finished execution's live output stays followable on the
// replica that ran it (a client that lost its stream resumes within it; later, Follow replays
// the stored, bounded output).
const liveRetention = 5 * time.Minute

// OutputEvent is one piece of an execution's output, as it was produced: Seq numbers the
// events of one execution 1, 2, … across both streams (a follower resumes after the last it
// saw); Offset is the byte offset of Data in its stream, bytes dropped from the middle of a
// long output counted; a UTF-8 character is never split between two events of a stream.
type OutputEvent = outlog.Event

// liveOutput is the followable output of one execution on this replica (package outlog: the
// start and the end of each stream, within the output limit) and, once it ended, how.
type liveOutput struct {
	log *outlog.Log

	mu     sync.Mutex
	done   bool
	result *Result
	err    error
}

func newLiveOutput(limit int64) *liveOutput { return &liveOutput{log: outlog.New(limit)} }

func (l *liveOutput) append(stream string, data []byte) { l.log.Append(stream, data) }

// finish records how the execution ended: its result, or the machinery failure.
func (l *liveOutput) finish(res *Result, err error) {
	l.mu.Lock()
	if !l.done {
		l.done, l.result, l.err = true, res, err
	}
	l.mu.Unlock()
	l.log.Close()
}

// read returns the kept events after seq after, whether some after it were dropped (gap),
// and, once the execution has ended and every event was returned, done with its end.
// changed is closed at the next change.
func (l *liveOutput) read(after int64) (evs []OutputEvent, gap, done bool, res *Result, err error, changed <-chan struct{}) {
	evs, gap, closed, changed := l.log.Read(after)
	if closed {
		l.mu.Lock()
		done, res, err = l.done, l.result, l.err
		l.mu.Unlock()
	}
	return evs, gap, done, res, err, changed
}

// liveWriter feeds one stream of an execution into its liveOutput, holding back the bytes of
// a UTF-8 character cut at the end of a write until the next one (or flush).
type liveWriter struct {
	l       *liveOutput
	stream  string
	partial []byte
}

func (w *liveWriter) Write(p []byte) (int, error) {
	n := len(p)
	data := p // the log copies what it keeps
	if len(w.partial) > 0 {
		data = append(w.partial, p...)
	}
	w.partial = nil
	if cut := incompleteSuffix(data); cut > 0 {
		w.partial = append([]byte(nil), data[len(data)-cut:]...)
		data = data[:len(data)-cut]
	}
	if len(data) > 0 {
		w.l.append(w.stream, data)
	}
	return n, nil
}

// Skip passes on that n bytes of the stream were dropped before they reached it.
func (w *liveWriter) Skip(n int64) {
	w.flush()
	w.l.log.Skip(w.stream, n)
}

// flush passes on what Write held back.
func (w *liveWriter) flush() {
	if len(w.partial) > 0 {
		w.l.append(w.stream, w.partial)
		w.partial = nil
	}
}

// incompleteSuffix is how many bytes at the end of b begin a UTF-8 character that b does not
// complete (0 for text that ends on a character boundary, and for bytes that are no UTF-8).
func incompleteSuffix(b []byte) int {
	for i := 1; i <= 3 && i <= len(b); i++ {
		c := b[len(b)-i]
		if utf8.RuneStart(c) {
			if c >= 0xC0 && !utf8.FullRune(b[len(b)-i:]) {
				return i
			}
			return 0
		}
	}
	return 0
}

// teeWriter writes to a capture and a liveWriter.
type teeWriter struct {
	c    *capture
	live *liveWriter
}

func (t teeWriter) Write(p []byte) (int, error) {
	_, _ = t.c.Write(p)
	return t.live.Write(p)
}

// Skip passes dropped bytes on to both (see capture.Skip).
func (t teeWriter) Skip(n int64) {
	t.c.Skip(n)
	t.live.Skip(n)
}

// liveOutputs are the followable executions of this replica, by task id.
type liveOutputs struct {
	mu sync.Mutex
	m  map[string]*liveOutput
}

func (o *liveOutputs) add(taskID string, l *liveOutput) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]*liveOutput{}
	}
	o.m[taskID] = l
}

func (o *liveOutputs) get(taskID string) *liveOutput {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[taskID]
}

// retire forgets taskID's output after liveRetention.
func (o *liveOutputs) retire(taskID string) {
	time.AfterFunc(liveRetention, func() {
		o.mu.Lock()
		delete(o.m, taskID)
		o.mu.Unlock()
	})
}

// Follower reads the output of one execution as it is produced (Service.Follow). Not safe for
// concurrent use.
type Follower struct {
	s      *Service
	p      principal.Principal
	taskID string
	live   *liveOutput // nil: the execution does not run on this replica (or long ended)
	after  int64
}

// Batch is what one Follower.Next returns.
type Batch struct {
	// Events are the next events, in order.
	Events []OutputEvent
	// Gap says events between the last one returned before and these were dropped (the
	// middle of a long output, overtaken before it was read; offsets still count it).
	Gap bool
	// Done says the execution has ended, with Result (the whole bounded output, as the
	// synchronous answer would have carried it) or, for a machinery failure, Err.
	Done   bool
	Result *Result
	Err    error
}

// followPoll is how often a Follower without live output looks at the task in the store.
const followPoll = 500 * time.Millisecond

// Follow returns a Follower of task id's output after event after (0: from the start),
// checking first that p may see the task (fault.NotFound otherwise, as GetTask). Output is
// live on the replica that runs the execution; elsewhere (another replica, a queue worker)
// Next reports nothing until the task has ended.
func (s *Service) Follow(ctx context.Context, p principal.Principal, id string, after int64) (*Follower, error) {
	if _, err := s.GetTask(ctx, p, id); err != nil {
		return nil, err
	}
	return &Follower{s: s, p: p, taskID: id, live: s.live.get(id), after: max(after, 0)}, nil
}

// Next waits, at most wait, for the next events or the end, and returns them; an empty,
// not Done batch means nothing happened within wait. Errors: ctx.Err(), and the store's when
// a task without live output is read.
func (f *Follower) Next(ctx context.Context, wait time.Duration) (Batch, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	if f.live == nil {
		return f.nextStored(ctx, timer.C)
	}
	for {
		evs, gap, done, res, err, changed := f.live.read(f.after)
		if len(evs) > 0 {
			f.after = evs[len(evs)-1].Seq
			return Batch{Events: evs, Gap: gap}, nil
		}
		if done {
			return Batch{Gap: gap, Done: true, Result: res, Err: err}, nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return Batch{}, nil
		case <-ctx.Done():
			return Batch{}, ctx.Err()
		}
	}
}

func (f *Follower) nextStored(ctx context.Context, timeout <-chan time.Time) (Batch, error) {
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		t, err := f.s.GetTask(ctx, f.p, f.taskID)
		if err != nil {
			return Batch{}, err
		}
		if t.FinishedAt != nil {
			b := Batch{Done: true, Result: t.Result}
			if t.Result == nil {
				b.Err = fault.New(fault.Kind(cmp.Or(t.ErrorType, string(fault.Internal))), "%s", cmp.Or(t.Error, "the task ended without a result"))
			}
			return b, nil
		}
		select {
		case <-tick.C:
		case <-timeout:
			return Batch{}, nil
		case <-ctx.Done():
			return Batch{}, ctx.Err()
		}
	}
}
