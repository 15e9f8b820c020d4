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
	"github.com/sandgate/sandgate/internal/providers"
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
	// notice is one the execution's start left for its result (a background process started
	// in a sandbox that was reset or recreated); set before the output is followed.
	notice string
	// mirror: the execution runs elsewhere and this replica follows it in its sandbox; its
	// end is read from the store.
	mirror bool

	mu          sync.Mutex
	done        bool
	result      *Result
	err         error
	readers     int  // Followers attached
	mirrorEnded bool // a mirror's sandbox has nothing more
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

// followers counts a Follower attaching (+1) or letting go (-1).
func (l *liveOutput) follow(n int) {
	l.mu.Lock()
	l.readers += n
	l.mu.Unlock()
}

func (l *liveOutput) followers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.readers
}

// end marks a mirror whose sandbox will give nothing more: its log is closed, its end is in
// the store.
func (l *liveOutput) end() {
	l.mu.Lock()
	l.mirrorEnded = true
	l.mu.Unlock()
	l.log.Close()
}

// ended reports whether l is a mirror that ended (end) with every event read.
func (l *liveOutput) ended() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mirror && l.mirrorEnded
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

// getOrAdd returns taskID's output, or adds the one make returns; made says it did.
func (o *liveOutputs) getOrAdd(taskID string, make func() *liveOutput) (l *liveOutput, made bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if l = o.m[taskID]; l != nil {
		return l, false
	}
	if o.m == nil {
		o.m = map[string]*liveOutput{}
	}
	l = make()
	o.m[taskID] = l
	return l, true
}

func (o *liveOutputs) get(taskID string) *liveOutput {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.m[taskID]
}

// drop forgets taskID's output now, if it is still l.
func (o *liveOutputs) drop(taskID string, l *liveOutput) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m[taskID] == l {
		delete(o.m, taskID)
	}
}

// retire forgets taskID's output after liveRetention.
func (o *liveOutputs) retire(taskID string) {
	time.AfterFunc(liveRetention, func() {
		o.mu.Lock()
		delete(o.m, taskID)
		o.mu.Unlock()
	})
}

// Position is how far a follower has read each stream: the byte offset of the next byte of
// stdout and of stderr (dropped bytes counted). It does not depend on where the output is
// read from, so a follower resumes from it on any replica (the API's event ids carry it).
type Position struct {
	Stdout, Stderr int64
}

func (p *Position) at(stream string) *int64 {
	if stream == StreamStderr {
		return &p.Stderr
	}
	return &p.Stdout
}

// Gap is a range of a stream's bytes a follower will never see: the middle of a long output,
// dropped to keep its start and its end (or overtaken before it was read).
type Gap struct {
	Stream   string
	From, To int64 // bytes [From, To) of Stream
}

// Follower reads the output of one execution as it is produced (Service.Follow). Not safe for
// concurrent use; Close it when done.
type Follower struct {
	s      *Service
	p      principal.Principal
	taskID string
	live   *liveOutput // nil: read the store until the task ends
	seq    int64       // the last event of live read
	pos    Position
	closed bool
}

// Batch is what one Follower.Next returns.
type Batch struct {
	// Events are the next events, in order, each starting at or after the position the
	// follower had read (an event the position cuts is cut too).
	Events []OutputEvent
	// Gaps are ranges before these events that were dropped.
	Gaps []Gap
	// Position is how far the follower has read after this batch.
	Position Position
	// Done says the execution has ended, with Result (the whole bounded output, as the
	// synchronous answer would have carried it) or, for a machinery failure, Err.
	Done   bool
	Result *Result
	Err    error
}

// followPoll is how often a Follower without live output looks at the task in the store.
const followPoll = 500 * time.Millisecond

// Follow returns a Follower of task id's output from position from (the zero Position: from
// the start), checking first that p may see the task (fault.NotFound otherwise, as GetTask).
//
// Output is live on the replica that runs the execution. Elsewhere — another replica, a
// gateway whose executions a queue worker runs — it is live too when the execution's sandbox
// keeps it (sandboxd: docker, kubernetes): this replica then follows it there (once for all
// its followers); otherwise Next reports nothing until the task has ended.
func (s *Service) Follow(ctx context.Context, p principal.Principal, id string, from Position) (*Follower, error) {
	t, err := s.GetTask(ctx, p, id)
	if err != nil {
		return nil, err
	}
	f := &Follower{s: s, p: p, taskID: id, pos: Position{Stdout: max(from.Stdout, 0), Stderr: max(from.Stderr, 0)}}
	f.live = s.live.get(id)
	if f.live == nil && t.FinishedAt == nil {
		f.live = s.mirror(p, t)
	}
	if f.live != nil {
		f.live.follow(1)
	}
	return f, nil
}

// Close lets go of the follower's output (a mirror nobody follows stops).
func (f *Follower) Close() {
	if !f.closed && f.live != nil {
		f.live.follow(-1)
	}
	f.closed = true
}

// Next waits, at most wait, for the next events or the end, and returns them; an empty,
// not Done batch means nothing happened within wait. Errors: ctx.Err(), and the store's when
// a task without live output is read.
func (f *Follower) Next(ctx context.Context, wait time.Duration) (Batch, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for f.live != nil {
		evs, _, done, res, err, changed := f.live.read(f.seq)
		if len(evs) > 0 {
			f.seq = evs[len(evs)-1].Seq
			if b := f.take(evs); len(b.Events) > 0 || len(b.Gaps) > 0 {
				return b, nil
			}
			continue
		}
		if done {
			b := Batch{Done: true, Result: res, Err: err}
			f.gapsTo(&b, f.live.log.Written(StreamStdout), f.live.log.Written(StreamStderr))
			b.Position = f.pos
			return b, nil
		}
		if f.live.ended() {
			// A mirror whose sandbox has nothing more: the end is in the store.
			f.live.follow(-1)
			f.live = nil
			break
		}
		select {
		case <-changed:
		case <-timer.C:
			return Batch{Position: f.pos}, nil
		case <-ctx.Done():
			return Batch{}, ctx.Err()
		}
	}
	return f.nextStored(ctx, timer.C)
}

// take turns events read from the live output into a batch from the follower's position.
func (f *Follower) take(evs []OutputEvent) Batch {
	var b Batch
	for _, ev := range evs {
		next := f.pos.at(ev.Stream)
		end := ev.Offset + int64(len(ev.Data))
		if end <= *next {
			continue // read before (a resumed follower)
		}
		if ev.Offset > *next {
			b.Gaps = append(b.Gaps, Gap{Stream: ev.Stream, From: *next, To: ev.Offset})
		} else if ev.Offset < *next {
			// A resumed follower's position cuts this event: keep its unread part (the
			// position is always on a character boundary, as every event ends on one).
			ev.Data = ev.Data[*next-ev.Offset:]
			ev.Offset = *next
		}
		*next = end
		b.Events = append(b.Events, ev)
	}
	b.Position = f.pos
	return b
}

// gapsTo adds the gaps between the follower's position and the streams' ends to b.
func (f *Follower) gapsTo(b *Batch, stdout, stderr int64) {
	for _, g := range []Gap{{StreamStdout, f.pos.Stdout, stdout}, {StreamStderr, f.pos.Stderr, stderr}} {
		if g.To > g.From {
			b.Gaps = append(b.Gaps, g)
			*f.pos.at(g.Stream) = g.To
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
			b := Batch{Done: true, Result: t.Result, Position: f.pos}
			if t.Result == nil {
				b.Err = fault.New(fault.Kind(cmp.Or(t.ErrorType, string(fault.Internal))), "%s", cmp.Or(t.Error, "the task ended without a result"))
			}
			return b, nil
		}
		select {
		case <-tick.C:
		case <-timeout:
			return Batch{Position: f.pos}, nil
		case <-ctx.Done():
			return Batch{}, ctx.Err()
		}
	}
}

// mirrorIdle is how long a mirror nobody follows keeps following its execution.
const mirrorIdle = 30 * time.Second

// mirror returns the live output of unfinished task t, which runs elsewhere, as this replica
// follows it in its sandbox — one mirror per task, shared by this replica's followers, and
// stopped once none has followed it for mirrorIdle. Its log is a copy of what the sandbox
// keeps (the start and the end of each stream, offsets as they were written); it ends when
// the execution does, and the follower then reads the end from the store. Nil when t's
// profile is unknown here.
func (s *Service) mirror(p principal.Principal, t Task) *liveOutput {
	prof := s.profiles[t.Profile]
	if prof == nil {
		return nil
	}
	l, made := s.live.getOrAdd(t.ID, func() *liveOutput {
		l := newLiveOutput(s.maxOutput())
		l.mirror = true
		return l
	})
	if !made {
		return l
	}
	go func() {
		defer s.live.drop(t.ID, l) // a follower that comes later mirrors it again, or reads the store
		defer l.end()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			tick := time.NewTicker(mirrorIdle / 3)
			defer tick.Stop()
			idle := 0
			for {
				select {
				case <-s.closing:
					cancel()
					return
				case <-ctx.Done():
					return
				case <-tick.C:
					if l.followers() == 0 {
						if idle++; idle >= 3 {
							cancel()
							return
						}
					} else {
						idle = 0
					}
				}
			}
		}()
		s.runMirror(ctx, p, t.ID, l)
	}()
	return l
}

// runMirror follows task id in its sandbox into l until the execution ends there, the task
// ends, or ctx does.
func (s *Service) runMirror(ctx context.Context, p principal.Principal, id string, l *liveOutput) {
	for wait := 100 * time.Millisecond; ; wait = min(wait*2, 2*time.Second) {
		t, err := s.store.GetTask(ctx, id, "")
		if err != nil || t.FinishedAt != nil {
			return
		}
		if t.StartedAt != nil {
			x, done, err := s.executionsOf(ctx, p, t)
			if err != nil && fault.KindOf(err) != fault.NotFound {
				return // its provider keeps no executions, or the sandbox cannot be reached
			}
			if err == nil {
				out := &outputs{liveOut: &liveWriter{l: l, stream: StreamStdout}, liveErr: &liveWriter{l: l, stream: StreamStderr}}
				_, err = x.Reattach(ctx, id, providers.Output{Stdout: out.liveOut, Stderr: out.liveErr})
				out.flush()
				done()
				if fault.KindOf(err) != fault.NotFound {
					return // it ended (or was stopped) there: the rest is in the store
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
