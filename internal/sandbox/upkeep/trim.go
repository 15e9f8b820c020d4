package upkeep

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/sandbox/clock"
)

// The retained-output quota (sandbox.quotas.retained_output_bytes) bounds the output that one
// principal's finished tasks keep in the response store until broker.response_ttl. New work
// is never refused for it — an agent that runs a lot should not be stopped by results it no
// longer reads — instead the oldest results lose their stdout, stderr and rich results (the
// task stays, with its status, exit code and byte counts, marked output_dropped with a
// notice) until the newest ones fit. Each completion records the bytes its result keeps
// (stdout and stderr as stored, and the rich results' data); after a completion with output,
// the owner's results are trimmed in the background, at most once per trimEvery per owner and
// replica, so an execution's own path pays nothing for it and a busy owner costs one scan of
// its retained results per trimEvery. Between two trims, and for background processes,
// adopted tasks and completions recorded from the spool (recorded without the caller's
// principal at hand: they are trimmed with the owner's next execution), the total may pass
// the limit for a while.

// trimEvery is the shortest time between two trims of one owner's results on a replica.
const trimEvery = 5 * time.Second

// trimTimeout bounds one trim statement.
const trimTimeout = 30 * time.Second

// DroppedOutput is merged into a result whose output was dropped (Store.DropOldestOutputs).
var DroppedOutput = json.RawMessage(`{"stdout": "", "stderr": "", "stdout_head": null, "stderr_head": null, "results": null, "output_dropped": true}`)

// DroppedNotice tells the reader of such a result why its output is empty.
const DroppedNotice = "this task's output was dropped to keep the output of your finished tasks within sandbox.quotas.retained_output_bytes; newer results keep theirs"

// Trimmer runs the background trims of retained output (one goroutine per owner at a time)
// until Close. Build it with NewTrimmer.
type Trimmer struct {
	store Store
	clock clock.Clock
	log   *slog.Logger

	mu      sync.Mutex
	running map[string]bool  // owner → a trim goroutine exists
	again   map[string]int64 // owner → the limit of one more trim wanted after it
	closed  bool             // closing: no trim starts any more
	closing chan struct{}
	wg      sync.WaitGroup
}

// NewTrimmer returns a Trimmer dropping output in st.
func NewTrimmer(st Store, c clock.Clock, log *slog.Logger) *Trimmer {
	return &Trimmer{store: st, clock: c, log: log, running: map[string]bool{}, again: map[string]int64{}, closing: make(chan struct{})}
}

// KeepWithin trims owner's retained output to limit bytes (≤ 0: none) in the background,
// after a completion that kept bytes of output.
func (t *Trimmer) KeepWithin(owner string, limit, bytes int64) {
	if bytes <= 0 || limit <= 0 || owner == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	if t.running[owner] {
		t.again[owner] = limit
		return
	}
	t.running[owner] = true
	t.wg.Add(1)
	go t.loop(owner, limit)
}

// loop trims owner's results, then again (after trimEvery) as long as completions asked for
// it meanwhile; it ends early when the trimmer closes.
func (t *Trimmer) loop(owner string, limit int64) {
	defer t.wg.Done()
	for {
		start := t.clock.Now()
		ctx, cancel := context.WithTimeout(context.Background(), trimTimeout)
		n, err := t.store.DropOldestOutputs(ctx, owner, limit, DroppedOutput)
		cancel()
		switch {
		case err != nil:
			t.log.Warn("dropping old task output over the retained_output_bytes quota failed", "owner_id", owner, "err", err)
		case n > 0:
			t.log.Info("dropped the output of old tasks over the retained_output_bytes quota", "owner_id", owner, "tasks", n)
		}
		t.mu.Lock()
		next, more := t.again[owner]
		delete(t.again, owner)
		if !more {
			delete(t.running, owner)
		}
		t.mu.Unlock()
		if !more {
			return
		}
		limit = next
		wait := t.clock.NewTimer(trimEvery - t.clock.Now().Sub(start))
		select {
		case <-t.closing:
			wait.Stop()
			t.mu.Lock()
			delete(t.running, owner)
			t.mu.Unlock()
			return
		case <-wait.C():
		}
	}
}

// CloseTrims stops new trims, ends the waits between trims and waits for the running ones.
func (t *Trimmer) CloseTrims() {
	t.mu.Lock()
	if !t.closed {
		t.closed = true
		close(t.closing)
	}
	t.mu.Unlock()
	t.wg.Wait()
}
