package sandbox

import (
	"container/list"
	"context"
	"math"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/outlog"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox/execute"
	"github.com/sandgate/sandgate/internal/store"
)

// Streams of OutputEvent.Stream.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// OutputEvent is one piece of an execution's output, as it was produced: Seq numbers the
// events of one execution 1, 2, … across both streams (a follower resumes after the last it
// saw; 0 in output replayed from a stored result); Offset is the byte offset of Data in its
// stream, bytes dropped from the middle of a long output counted; a UTF-8 character is never
// split between two events of a stream. Data is shared with the other followers: read-only.
type OutputEvent = outlog.Event

// liveOutput is what this replica keeps in memory of one execution's output for its
// followers (kept.go): its live log (package outlog: the start and the end of each stream,
// within the output limit) and, once it ended, how — its result while followers read it.
// A finished task's stored result has no log.
type liveOutput struct {
	kept   *keptOutputs
	taskID string
	log    *outlog.Log // nil: a finished task's stored result, read for its followers
	// notice is one the execution's start left for its result (a background process started
	// in a sandbox that was reset or recreated); set before the output is followed.
	notice string
	// mirror: the execution runs elsewhere and this replica follows it in its sandbox; its
	// end is read from the store.
	mirror bool

	mu          sync.Mutex
	done        bool
	result      *Result // kept while followers read it (resultHeld counted); nil: in the store
	resultHeld  int64
	err         error         // a machinery failure's, when done
	loading     chan struct{} // closed when the read of the stored result under way ends
	readers     int           // Followers attached
	mirrorEnded bool          // a mirror's sandbox has nothing more

	// Guarded by kept.mu:
	held           int64         // bytes counted for it
	evicted        bool          // let go: nothing more is kept, followers read the store
	droppedRunning bool          // let go while its execution ran
	elem           *list.Element // its place in kept.running or kept.finished
	endedAt        time.Time     // when it moved to kept.finished
}

// Grow and Shrink meter the live log (outlog.Meter).
func (l *liveOutput) Grow(n int64) bool { return l.kept.grow(l, n) }
func (l *liveOutput) Shrink(n int64)    { l.kept.shrink(l, n) }

func (l *liveOutput) append(stream string, data []byte) { l.log.Append(stream, data) }

// release drops what l keeps (after keptOutputs let it go): its log's pieces and its result.
func (l *liveOutput) release() {
	if l.log != nil {
		l.log.Drop()
	}
	l.mu.Lock()
	l.result, l.resultHeld = nil, 0
	l.mu.Unlock()
}

// finish records how the execution ended: its result, or the machinery failure. The result
// is kept only while followers are attached (they read it at their end); after that it is
// read from the store.
func (l *liveOutput) finish(res *Result, err error) {
	var cost int64
	if res != nil && l.followers() > 0 {
		if cost = resultCost(res); !l.kept.grow(l, cost) {
			cost = 0
		}
	}
	l.mu.Lock()
	if !l.done {
		l.done, l.err = true, err
		if cost > 0 && !l.kept.isLet(l) {
			l.result, l.resultHeld, cost = res, cost, 0
		}
	}
	l.mu.Unlock()
	if cost > 0 {
		l.kept.shrink(l, cost) // counted, not kept
	}
	l.log.Close()
	l.kept.ended(l)
}

// end returns how the execution ended, once it did: the failure, or its result — kept, or
// read from the store once for all followers (and kept while they read it). ok is false when
// the store does not have the end yet (its completion is still being recorded). Errors:
// ctx's, the store's.
func (l *liveOutput) end(ctx context.Context) (res *Result, failure error, ok bool, err error) {
	for {
		l.mu.Lock()
		if l.done && (l.result != nil || l.err != nil) {
			res, failure = l.result, l.err
			l.mu.Unlock()
			return res, failure, true, nil
		}
		wait := l.loading
		if wait == nil {
			l.loading = make(chan struct{})
			l.mu.Unlock()
			break
		}
		l.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, nil, false, ctx.Err()
		}
	}
	e, err := l.kept.load(ctx, l.taskID)
	var cost int64
	if err == nil && e.result != nil {
		if cost = resultCost(e.result); !l.kept.grow(l, cost) {
			cost = 0
		}
	}
	l.mu.Lock()
	if cost > 0 && !l.kept.isLet(l) && l.result == nil {
		l.result, l.resultHeld, cost = e.result, cost, 0
	}
	if err == nil && e.finished && e.result == nil && l.err == nil {
		l.err = e.err
	}
	close(l.loading)
	l.loading = nil
	l.mu.Unlock()
	if cost > 0 {
		l.kept.shrink(l, cost) // counted, not kept
	}
	if err != nil {
		return nil, nil, false, err
	}
	return e.result, e.err, e.finished, nil
}

// read returns the kept events of the live log after seq after, whether the log has ended
// (closed, every event returned), and a channel closed at its next change.
func (l *liveOutput) read(after int64) (evs []OutputEvent, closed bool, changed <-chan struct{}) {
	evs, _, closed, changed = l.log.Read(after)
	return evs, closed, changed
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

// teeWriter writes to a Capture and a liveWriter.
type teeWriter struct {
	c    *execute.Capture
	live *liveWriter
}

func (t teeWriter) Write(p []byte) (int, error) {
	_, _ = t.c.Write(p)
	return t.live.Write(p)
}

// Skip passes dropped bytes on to both (see execute.Capture.Skip).
func (t teeWriter) Skip(n int64) {
	t.c.Skip(n)
	t.live.Skip(n)
}

// follow counts a Follower attaching (+1) or letting go (-1). When the last one lets go of
// a finished output, its result is let go (it is in the store), and a stored result with it.
func (l *liveOutput) follow(n int) {
	l.mu.Lock()
	l.readers += n
	idle := l.readers == 0 && l.done
	var freed int64
	if idle && l.log != nil && l.result != nil {
		freed = l.resultHeld
		l.result, l.resultHeld = nil, 0
	}
	l.mu.Unlock()
	switch {
	case idle && l.log == nil:
		l.kept.let(l)
	case freed > 0:
		l.kept.shrink(l, freed)
	}
}

func (l *liveOutput) followers() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.readers
}

// endMirror marks a mirror whose sandbox will give nothing more: its log is closed, its end
// is in the store.
func (l *liveOutput) endMirror() {
	l.mu.Lock()
	l.mirrorEnded = true
	l.mu.Unlock()
	l.log.Close()
}

// mirrorDone reports whether l is a mirror that ended (endMirror).
func (l *liveOutput) mirrorDone() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mirror && l.mirrorEnded
}

// noteDropped joins liveDroppedNotice to c and res (res may be nil) when l was let go while
// its execution ran.
func (l *liveOutput) noteDropped(c *store.Completion, res *Result) {
	if l == nil || !l.kept.wasDroppedRunning(l) {
		return
	}
	c.Notice = joinNotice(c.Notice, liveDroppedNotice)
	if res != nil {
		res.Notice = joinNotice(res.Notice, liveDroppedNotice)
	}
}

// Position is how far a follower has read each stream: the byte offset of the next byte of
// stdout and of stderr (dropped bytes counted), and of the rich results (StreamResult). It
// does not depend on where the output is read from, so a follower resumes from it on any
// replica (the API's event ids carry it).
type Position struct {
	Stdout, Stderr int64
	Results        int64
}

func (p *Position) at(stream string) *int64 {
	switch stream {
	case StreamStderr:
		return &p.Stderr
	case StreamResult:
		return &p.Results
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
	// out is what this replica keeps of the output (its live log, or its stored result); nil:
	// nothing, the store says when the task ends.
	out *liveOutput
	seq int64 // the last event of out's log read
	// res is the stored result being replayed (shared with out while out keeps it).
	res    *Result
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
	// synchronous answer would have carried it; shared with other followers: read-only) or,
	// for a machinery failure, Err.
	Done   bool
	Result *Result
	Err    error
}

// followPoll is how often a Follower without kept output looks at the task in the store.
const followPoll = 500 * time.Millisecond

// Follow returns a Follower of task id's output from position from (the zero Position: from
// the start), checking first that p may see the task (fault.NotFound otherwise, as GetTask).
//
// Output is live on the replica that runs the execution, and for liveRetention after it
// ended while the kept-output budget has room (kept.go). Elsewhere — another replica, a
// gateway whose executions a queue worker runs — it is live too when the execution's sandbox
// keeps it (sandboxd: docker, kubernetes): this replica then follows it there (once for all
// its followers); otherwise Next reports nothing until the task has ended. Output that is
// not (or no longer) live is replayed from the task's stored result once it ended: each
// stream's kept start and end at their offsets, stdout first, read from the store once for
// all of this replica's followers.
func (s *Service) Follow(ctx context.Context, p principal.Principal, id string, from Position) (*Follower, error) {
	t, err := s.runs.taskSummary(ctx, p, id)
	if err != nil {
		return nil, err
	}
	f := &Follower{s: s, p: p, taskID: id, pos: Position{Stdout: max(from.Stdout, 0), Stderr: max(from.Stderr, 0), Results: max(from.Results, 0)}}
	out := s.runs.kept.get(id)
	switch {
	case out == nil && t.FinishedAt == nil:
		out = s.runs.mirror(p, t)
	case out == nil:
		out = s.runs.kept.stored(id)
	}
	f.attach(out)
	return f, nil
}

// attach makes l (nil: none) the kept output f reads.
func (f *Follower) attach(l *liveOutput) {
	if f.out != nil {
		f.out.follow(-1)
	}
	f.out, f.seq = l, 0
	if l != nil {
		l.follow(1)
	}
}

// Close lets go of the follower's output (a mirror nobody follows stops).
func (f *Follower) Close() {
	if !f.closed {
		f.attach(nil)
		f.res = nil
	}
	f.closed = true
}

// Next waits, at most wait, for the next events or the end, and returns them; an empty,
// not Done batch means nothing happened within wait. Errors: ctx.Err(), and the store's when
// a task without live output is read.
func (f *Follower) Next(ctx context.Context, wait time.Duration) (Batch, error) {
	timer := f.s.clock.NewTimer(wait)
	defer timer.Stop()
	var tick Ticker
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	for {
		var (
			b     Batch
			ended bool // b (or err) is the answer
			err   error
		)
		switch l := f.out; {
		case f.res != nil:
			return f.replay(), nil
		case l != nil && l.log != nil:
			b, ended, err = f.nextLive(ctx, l, timer)
		case l != nil:
			ended, err = f.readStored(ctx, l, &b)
		default:
			b, ended, err = f.nextElsewhere(ctx, &tick, timer)
		}
		if ended || err != nil {
			return b, err
		}
	}
}

// nextLive reads f's live output l: the next events, its end, or nothing within timer. It
// reports false when f should look again (it let go of l, or read only what it had read).
func (f *Follower) nextLive(ctx context.Context, l *liveOutput, timer Timer) (Batch, bool, error) {
	evs, closed, changed := l.read(f.seq)
	if len(evs) > 0 {
		f.seq = evs[len(evs)-1].Seq
		b := f.take(evs)
		return b, len(b.Events) > 0 || len(b.Gaps) > 0, nil
	}
	if l.log.Dropped() || l.mirrorDone() {
		// Let go to keep within the budget, retired, or a mirror whose sandbox has
		// nothing more: the rest comes from the store.
		f.attach(nil)
		return Batch{}, false, nil
	}
	if closed && l.isDone() {
		res, failure, ok, err := l.end(ctx)
		if err != nil {
			return Batch{}, true, err
		}
		if !ok {
			f.attach(nil) // its completion is not stored yet: wait for it
			return Batch{}, false, nil
		}
		b := Batch{Done: true, Result: res, Err: failure}
		f.gapsTo(&b, l.log.Written(StreamStdout), l.log.Written(StreamStderr))
		b.Position = f.pos
		return b, true, nil
	}
	select {
	case <-changed:
		return Batch{}, false, nil
	case <-timer.C():
		return Batch{Position: f.pos}, true, nil
	case <-ctx.Done():
		return Batch{}, true, ctx.Err()
	}
}

// readStored reads a finished task's stored result through l (once for this replica's
// followers): f replays it next, or *b is the failure; true when *b (or the error) is the
// answer.
func (f *Follower) readStored(ctx context.Context, l *liveOutput, b *Batch) (bool, error) {
	res, failure, ok, err := l.end(ctx)
	switch {
	case err != nil:
		return true, err
	case !ok:
		f.attach(nil)
	case failure != nil:
		*b = Batch{Done: true, Err: failure, Position: f.pos}
		return true, nil
	default:
		f.res = res
	}
	return false, nil
}

// nextElsewhere waits for a task whose output this replica does not hold: it follows the
// output once this replica runs the execution (it adopted it), or its stored result once
// the task ended, polling the store every followPoll on *tick (made on first use).
func (f *Follower) nextElsewhere(ctx context.Context, tick *Ticker, timer Timer) (Batch, bool, error) {
	if l := f.s.runs.kept.following(f.taskID); l != nil {
		f.attach(l)
		return Batch{}, false, nil
	}
	t, err := f.s.runs.taskSummary(ctx, f.p, f.taskID)
	if err != nil {
		return Batch{}, true, err
	}
	if t.FinishedAt != nil {
		f.attach(f.s.runs.kept.stored(f.taskID))
		return Batch{}, false, nil
	}
	if *tick == nil {
		*tick = f.s.clock.NewTicker(followPoll)
	}
	select {
	case <-(*tick).C():
		return Batch{}, false, nil
	case <-timer.C():
		return Batch{Position: f.pos}, true, nil
	case <-ctx.Done():
		return Batch{}, true, ctx.Err()
	}
}

// isDone reports whether the execution has ended (finish).
func (l *liveOutput) isDone() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
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
		if ev.Stream == StreamResult {
			// Whole results only, and no gaps: the result has them all.
			if ev.Offset >= *next {
				*next = end
				b.Events = append(b.Events, ev)
			}
			continue
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

// replay returns the next events of the stored result f.res from f's position — at most
// outlog.MaxRead bytes, a gap only before the batch's first event of its stream — or, once
// every kept byte was returned, its end.
func (f *Follower) replay() Batch {
	var b Batch
	left := int64(outlog.MaxRead)
	streams := storedStreams(f.res)
	for _, st := range streams {
		next := f.pos.at(st.name)
		for _, r := range st.ranges {
			if r.from+r.n <= *next {
				continue
			}
			start := max(*next, r.from)
			if start > *next {
				if len(b.Events) > 0 {
					b.Position = f.pos
					return b // the gap goes before the events after it
				}
				b.Gaps = append(b.Gaps, Gap{Stream: st.name, From: *next, To: start})
				*next = start
			}
			data := st.piece(r, start, left)
			switch {
			case len(data) == 0 && len(b.Events) == 0:
				// Unreadable (not base64 after all): a gap, not a replay that never ends.
				b.Gaps = append(b.Gaps, Gap{Stream: st.name, From: start, To: r.from + r.n})
				*next = r.from + r.n
				continue
			case len(data) == 0:
				b.Position = f.pos
				return b // this batch is full
			}
			b.Events = append(b.Events, OutputEvent{Stream: st.name, Offset: start, Data: data})
			left -= int64(len(data))
			*next = start + int64(len(data))
			if *next < r.from+r.n {
				b.Position = f.pos
				return b // this batch is full
			}
		}
	}
	b.Done, b.Result = true, f.res
	f.gapsTo(&b, streams[0].total, streams[1].total)
	b.Position = f.pos
	return b
}

// mirrorIdle is how long a mirror nobody follows keeps following its execution.
const mirrorIdle = 30 * time.Second

// mirror returns the live output of unfinished task t, which runs elsewhere, as this replica
// follows it in its sandbox — one mirror per task, shared by this replica's followers, and
// stopped once none has followed it for mirrorIdle. Its log is a copy of what the sandbox
// keeps (the start and the end of each stream, offsets as they were written); it ends when
// the execution does, and the follower then reads the end from the store. Nil when t's
// profile is unknown here.
func (xs *executions) mirror(p principal.Principal, t Task) *liveOutput {
	s := xs.s
	prof := s.profiles.Get(t.Profile)
	if prof == nil {
		return nil
	}
	l, made := xs.kept.mirror(t.ID)
	if !made {
		return l
	}
	go func() {
		defer xs.kept.let(l) // a follower that comes later mirrors it again, or reads the store
		defer l.endMirror()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			tick := s.clock.NewTicker(mirrorIdle / 3)
			defer tick.Stop()
			idle := 0
			for {
				select {
				case <-xs.closing:
					cancel()
					return
				case <-ctx.Done():
					return
				case <-tick.C():
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
		xs.runMirror(ctx, p, t.ID, l)
	}()
	return l
}

// runMirror follows task id in its sandbox into l until the execution ends there, the task
// ends, or ctx does.
func (xs *executions) runMirror(ctx context.Context, p principal.Principal, id string, l *liveOutput) {
	s := xs.s
	for wait := 100 * time.Millisecond; ; wait = min(wait*2, 2*time.Second) {
		t, err := s.store.GetTask(ctx, id, "")
		if err != nil || t.FinishedAt != nil {
			return
		}
		if t.StartedAt != nil {
			x, done, err := xs.executionsOf(ctx, p, t)
			if err != nil && fault.KindOf(err) != fault.NotFound {
				return // its provider keeps no executions, or the sandbox cannot be reached
			}
			if err == nil {
				out := &outputs{liveOut: &liveWriter{l: l, stream: StreamStdout}, liveErr: &liveWriter{l: l, stream: StreamStderr}}
				// The sandbox bounded the results already: the mirror passes them on as they are.
				results := &liveResults{l: l, budget: execute.NewBudget(math.MaxInt64)}
				_, err = x.Reattach(ctx, id, providers.Output{Stdout: out.liveOut, Stderr: out.liveErr, ResultFunc: results.add})
				out.flush()
				done()
				if fault.KindOf(err) != fault.NotFound {
					return // it ended (or was stopped) there: the rest is in the store
				}
			}
		}
		if !sleep(ctx, s.clock, wait) {
			return
		}
	}
}
