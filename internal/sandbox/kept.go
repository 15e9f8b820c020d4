package sandbox

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/outlog"
)

// Kept output (docs/semantics.md §9 "Streaming"): what this replica holds in memory of its
// executions' output for followers — the live log of each execution running here (package
// outlog) and, for liveRetention after it ended, its log and, while followers read it, its
// result — is one budget, sandbox.kept_output_memory_bytes (Settings.KeptOutputMemoryBytes).
// Everything else of a finished execution is in the store, where its result counts against
// its owner's retained_output_bytes (retained.go).
//
// The budget counts, exactly, the bytes the kept outputs hold: each log piece's bytes plus
// outlog.EventOverhead, and each kept result's stdout and stderr plus resultOverhead. Before
// anything is kept, room is made for it: past the ceiling the oldest kept outputs are let go
// — finished ones first (oldest end first: their result is in the store, so nothing is lost
// but the order in which stdout and stderr interleaved), then running ones (oldest start
// first: their followers see nothing more until the execution ends, then the rest from its
// stored result, and its result says so, liveDroppedNotice). Followers share what is kept:
// one log, one result, however many follow (a follower holds one outlog.MaxRead batch of
// its own at most). A finished task nothing is kept of here is followed from its stored
// result, read once for all its followers on this replica and let go when the last leaves.

// liveRetention is how long a finished execution's live log stays followable on the replica
// that ran it (a client that lost its stream resumes within it, events in the order they
// were written); later — or sooner when the budget needs the room — followers replay the
// stored result.
const liveRetention = 5 * time.Minute

// DefaultKeptOutputMemoryBytes is Settings.KeptOutputMemoryBytes's default (config
// sandbox.kept_output_memory_bytes): 128 MiB.
const DefaultKeptOutputMemoryBytes = 128 << 20

// resultOverhead is what a kept result counts besides its stdout and stderr: the Result
// value and its other fields.
const resultOverhead = 1 << 10

// liveDroppedNotice is joined to the result of an execution whose live output was let go
// while it ran.
const liveDroppedNotice = "this execution's live output was dropped from the gateway's memory while it ran, to keep the output the gateway holds for followers within sandbox.kept_output_memory_bytes; followers got the rest of it from this result"

// KeptOutputMemory is how much memory this replica's kept output holds (Service.KeptOutput).
type KeptOutputMemory struct {
	// Held is the bytes counted now; Peak the most counted at once since the start; Limit
	// the ceiling (sandbox.kept_output_memory_bytes). Held ≤ Peak ≤ Limit.
	Held, Peak, Limit int64
	// Outputs is how many executions have output kept (live logs, results).
	Outputs int
	// Dropped counts the kept outputs let go to stay within Limit (not those that ended
	// their retention): DroppedRunning of them while their execution ran.
	Dropped, DroppedRunning int64
}

// KeptOutput reports the memory this replica's kept output holds.
func (s *Service) KeptOutput() KeptOutputMemory { return s.runs.kept.memory() }

// keptOutputs are this replica's kept outputs, by task id, within one ceiling.
type keptOutputs struct {
	limit  int64 // the ceiling, bytes
	bounds int64 // the output limit of one execution's log (sandbox.max_output_bytes)
	// load reads how task id ended from the store (storedEnd).
	load func(ctx context.Context, id string) (taskEnd, error)
	// clock times the retention of finished outputs.
	clock Clock

	mu                      sync.Mutex
	held, peak              int64
	m                       map[string]*liveOutput
	running, finished       list.List // *liveOutput, oldest first (start, end)
	dropped, droppedRunning int64
	expiry                  Timer // lets finished ones go after liveRetention; nil when none is
	closed                  bool
}

// taskEnd is how a task ended, as the store has it.
type taskEnd struct {
	finished bool    // false: it has not (its completion is not stored yet)
	result   *Result // nil for a machinery failure
	err      error   // the machinery failure
}

func newKeptOutputs(limit, bounds int64, load func(ctx context.Context, id string) (taskEnd, error), clock Clock) *keptOutputs {
	return &keptOutputs{limit: limit, bounds: bounds, load: load, clock: clock, m: map[string]*liveOutput{}}
}

func (k *keptOutputs) memory() KeptOutputMemory {
	k.mu.Lock()
	defer k.mu.Unlock()
	return KeptOutputMemory{Held: k.held, Peak: k.peak, Limit: k.limit, Outputs: k.running.Len() + k.finished.Len(), Dropped: k.dropped, DroppedRunning: k.droppedRunning}
}

// start returns the kept output of execution taskID, which starts running here now: its
// live log, in the budget. A kept output of the task that was there is let go.
func (k *keptOutputs) start(taskID string) *liveOutput {
	l := k.newLive(taskID)
	k.mu.Lock()
	old := k.m[taskID]
	if old != nil {
		k.removeLocked(old, true)
	}
	k.m[taskID] = l
	l.elem = k.running.PushBack(l)
	k.mu.Unlock()
	if old != nil {
		old.release()
	}
	return l
}

func (k *keptOutputs) newLive(taskID string) *liveOutput {
	l := &liveOutput{kept: k, taskID: taskID}
	l.log = outlog.NewMetered(k.bounds, l)
	return l
}

// mirror returns taskID's kept output, or adds a mirror (Service.mirror) when there is none;
// made says it did. An execution running here whose live output was let go is not mirrored:
// its followers wait for its end.
func (k *keptOutputs) mirror(taskID string) (l *liveOutput, made bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l = k.m[taskID]; l != nil {
		return l, false
	}
	l = k.newLive(taskID)
	l.mirror = true
	k.m[taskID] = l
	l.elem = k.running.PushBack(l)
	return l, true
}

// stored returns taskID's kept output, adding one for its stored result when there is none
// (the task has finished; the result is read when a follower first needs it).
func (k *keptOutputs) stored(taskID string) *liveOutput {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l := k.m[taskID]; l != nil && !l.evicted {
		return l
	}
	l := &liveOutput{kept: k, taskID: taskID, done: true, endedAt: k.clock.Now()}
	k.m[taskID] = l
	l.elem = k.finished.PushBack(l)
	if k.expiry == nil && !k.closed {
		k.expiry = k.clock.AfterFunc(liveRetention, k.expire)
	}
	return l
}

// following returns the live log of taskID kept here now, for a follower that lost the one it
// read (a mirror this replica replaced when it adopted the execution): nil when there is
// none, it was let go, it ended, or it has nothing more (the store then says how the task
// ended).
func (k *keptOutputs) following(taskID string) *liveOutput {
	k.mu.Lock()
	l := k.m[taskID]
	if l == nil || l.evicted || l.log == nil {
		l = nil
	}
	k.mu.Unlock()
	if l == nil || l.log.Dropped() || l.mirrorDone() || l.isDone() {
		return nil
	}
	return l
}

func (k *keptOutputs) get(taskID string) *liveOutput {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m[taskID]
}

// ended moves l among the finished outputs (the newest), to be let go after liveRetention.
func (k *keptOutputs) ended(l *liveOutput) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if l.evicted {
		if k.m[l.taskID] == l {
			delete(k.m, l.taskID) // let go while it ran: its followers read the store now
		}
		return
	}
	k.running.Remove(l.elem)
	l.endedAt = k.clock.Now()
	l.elem = k.finished.PushBack(l)
	if k.expiry == nil && !k.closed {
		k.expiry = k.clock.AfterFunc(liveRetention, k.expire)
	}
}

// expire lets the finished outputs older than liveRetention go, and sets the timer for the
// next one.
func (k *keptOutputs) expire() {
	var old []*liveOutput
	k.mu.Lock()
	now := k.clock.Now()
	k.expiry = nil
	for e := k.finished.Front(); e != nil; e = k.finished.Front() {
		l := e.Value.(*liveOutput)
		if wait := l.endedAt.Add(liveRetention).Sub(now); wait > 0 {
			if !k.closed {
				k.expiry = k.clock.AfterFunc(wait, k.expire)
			}
			break
		}
		k.removeLocked(l, true)
		old = append(old, l)
	}
	k.mu.Unlock()
	for _, l := range old {
		l.release()
	}
}

// close stops the retention timer (Service.Close).
func (k *keptOutputs) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	if k.expiry != nil {
		k.expiry.Stop()
		k.expiry = nil
	}
}

// let lets l go now (a mirror that ended, a retention that ran out, a stored result nobody
// follows any more); its followers read the store from then on.
func (k *keptOutputs) let(l *liveOutput) {
	k.mu.Lock()
	gone := l.evicted
	if !gone {
		k.removeLocked(l, true)
	}
	k.mu.Unlock()
	if !gone {
		l.release()
	}
}

// removeLocked takes l out of the budget: its bytes no longer count and nothing more of it
// is kept; forget: it is forgotten by task id (else it stays as the mark of an execution
// running here whose live output was let go, until it ends). The caller then calls
// l.release (outside k.mu).
func (k *keptOutputs) removeLocked(l *liveOutput, forget bool) {
	k.held -= l.held
	l.held, l.evicted = 0, true
	if l.elem != nil {
		k.running.Remove(l.elem) // a no-op on the list it is not in
		k.finished.Remove(l.elem)
		l.elem = nil
	}
	if forget && k.m[l.taskID] == l {
		delete(k.m, l.taskID)
	}
}

// grow makes room for n more bytes of l and counts them; false when l may keep nothing
// more (it was let go, or n does not fit even in an empty budget). Room is made by letting
// the oldest kept outputs go, finished before running — l itself when its turn comes.
func (k *keptOutputs) grow(l *liveOutput, n int64) bool {
	var victims []*liveOutput
	k.mu.Lock()
	ok := !l.evicted && n <= k.limit
	for ok && k.held+n > k.limit {
		v := k.oldestLocked()
		if !v.done {
			v.droppedRunning = true
			k.droppedRunning++
		}
		k.dropped++
		k.removeLocked(v, v.done || v.mirror)
		victims = append(victims, v)
		ok = v != l
	}
	if ok {
		l.held += n
		k.held += n
		k.peak = max(k.peak, k.held)
	}
	k.mu.Unlock()
	for _, v := range victims {
		v.release()
	}
	return ok
}

// oldestLocked is the kept output to let go first: the oldest finished one, else the oldest
// running one. Call with room needed: something is kept.
func (k *keptOutputs) oldestLocked() *liveOutput {
	if e := k.finished.Front(); e != nil {
		return e.Value.(*liveOutput)
	}
	return k.running.Front().Value.(*liveOutput)
}

// shrink counts n bytes l let go.
func (k *keptOutputs) shrink(l *liveOutput, n int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !l.evicted {
		l.held -= n
		k.held -= n
	}
}

// wasDroppedRunning reports whether l was let go while its execution ran.
func (k *keptOutputs) wasDroppedRunning(l *liveOutput) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return l.droppedRunning
}

// isLet reports whether l was let go.
func (k *keptOutputs) isLet(l *liveOutput) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return l.evicted
}

// resultCost is what keeping res counts.
func resultCost(res *Result) int64 {
	return int64(len(res.Stdout)+len(res.Stderr)) + resultsSize(res.Results) + resultOverhead
}

// storedEnd reads how task id ended from the store, for the kept outputs.
func (xs *executions) storedEnd(ctx context.Context, id string) (taskEnd, error) {
	s := xs.s
	st, err := s.store.GetTask(ctx, id, "")
	if err != nil {
		return taskEnd{}, err
	}
	t, err := taskView(st)
	if err != nil {
		return taskEnd{}, err
	}
	if t.FinishedAt == nil {
		return taskEnd{}, nil
	}
	end := taskEnd{finished: true, result: t.Result}
	if t.Result == nil {
		end.err = failureOfTask(t)
	}
	return end, nil
}
