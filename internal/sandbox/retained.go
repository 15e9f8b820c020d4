package sandbox

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/principal"
)

// The retained-output quota (sandbox.quotas.retained_output_bytes) bounds the output that one
// principal's finished tasks keep in the response store until broker.response_ttl. New work
// is never refused for it — an agent that runs a lot should not be stopped by results it no
// longer reads — instead the oldest results lose their stdout, stderr and rich results (the
// task stays, with its status, exit code and byte counts, marked output_dropped with a
// notice) until the newest ones fit. Each completion records the bytes its result keeps
// (stdout and stderr as stored, and the rich results' data); after a completion with output, the owner's results are trimmed in the
// background, at most once per trimEvery per owner and replica, so an execution's own path
// pays nothing for it and a busy owner costs one scan of its retained results per trimEvery.
// Between two trims, and for background processes, adopted tasks and completions recorded
// from the spool (recorded without the caller's principal at hand: they are trimmed with the
// owner's next execution), the total may pass the limit for a while.

// trimEvery is the shortest time between two trims of one owner's results on a replica.
const trimEvery = 5 * time.Second

// trimTimeout bounds one trim statement.
const trimTimeout = 30 * time.Second

// droppedOutput is merged into a result whose output was dropped (Store.DropOldestOutputs).
var droppedOutput = json.RawMessage(`{"stdout": "", "stderr": "", "stdout_head": null, "stderr_head": null, "results": null, "output_dropped": true}`)

// droppedNotice tells the reader of such a result why its output is empty.
const droppedNotice = "this task's output was dropped to keep the output of your finished tasks within sandbox.quotas.retained_output_bytes; newer results keep theirs"

// outputBytes is how many bytes of output res keeps (its stored stdout and stderr, and its
// rich results' data).
func outputBytes(res *Result) int64 {
	if res == nil {
		return 0
	}
	return int64(len(res.Stdout)+len(res.Stderr)) + resultsSize(res.Results)
}

// outputTrimmer runs the background trims (one goroutine per owner at a time).
type outputTrimmer struct {
	mu      sync.Mutex
	running map[string]bool  // owner → a trim goroutine exists
	again   map[string]int64 // owner → the limit of one more trim wanted after it
	closed  bool             // the service closes: no trim starts any more
	wg      sync.WaitGroup
}

// keepOutputWithin trims p's retained output to its limit in the background, after a
// completion that kept bytes of output.
func (s *Service) keepOutputWithin(p principal.Principal, bytes int64) {
	limit := s.quota.RetainedOutputBytes(p)
	if bytes <= 0 || limit <= 0 || p.ID == "" {
		return
	}
	t := &s.trimmer
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.running == nil {
		t.running, t.again = map[string]bool{}, map[string]int64{}
	}
	if t.closed {
		return
	}
	if t.running[p.ID] {
		t.again[p.ID] = limit
		return
	}
	t.running[p.ID] = true
	t.wg.Add(1)
	go s.trimLoop(p.ID, limit)
}

// trimLoop trims owner's results, then again (after trimEvery) as long as completions asked
// for it meanwhile; it ends early when the service closes.
func (s *Service) trimLoop(owner string, limit int64) {
	t := &s.trimmer
	defer t.wg.Done()
	for {
		start := s.now()
		ctx, cancel := context.WithTimeout(context.Background(), trimTimeout)
		n, err := s.store.DropOldestOutputs(ctx, owner, limit, droppedOutput)
		cancel()
		switch {
		case err != nil:
			s.log.Warn("dropping old task output over the retained_output_bytes quota failed", "owner_id", owner, "err", err)
		case n > 0:
			s.log.Info("dropped the output of old tasks over the retained_output_bytes quota", "owner_id", owner, "tasks", n)
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
		wait := s.clock.NewTimer(trimEvery - s.since(start))
		select {
		case <-s.closing:
			wait.Stop()
			t.mu.Lock()
			delete(t.running, owner)
			t.mu.Unlock()
			return
		case <-wait.C():
		}
	}
}

// waitTrims stops new trims and waits for the running ones (Close, once s.closing is closed).
func (s *Service) waitTrims() {
	s.trimmer.mu.Lock()
	s.trimmer.closed = true
	s.trimmer.mu.Unlock()
	s.trimmer.wg.Wait()
}
