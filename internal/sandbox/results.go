package sandbox

import (
	"encoding/json"
	"slices"
	"sync"

	"github.com/sandgate/sandgate/internal/providers"
)

// StreamResult is the stream of an execution's live output that carries its rich results,
// one event (the result's JSON) each, in order with its stdout and stderr. Its offsets count
// the bytes of the results' JSON before it; a result is never split between events.
const StreamResult = "result"

// Rich results are bounded like each output stream: together within sandbox.max_output_bytes
// (RichResult.Size), a result that does not fit what is left being dropped whole and named
// (RichResult.Dropped) — never cut — while later, smaller ones still fit. The provider is
// asked for the same bound (providers.ExecSpec.MaxResultBytes); the domain holds every
// provider to it.

// resultBudget keeps results within a limit.
type resultBudget struct {
	limit, used int64
}

// take returns r as it is kept: itself, or its dropped form when it does not fit.
func (b *resultBudget) take(r RichResult) RichResult {
	if r.Dropped != nil {
		return r
	}
	size := r.Size()
	if b.used+size <= b.limit {
		b.used += size
		return r
	}
	types := make([]string, 0, len(r.Data))
	for t := range r.Data {
		types = append(types, t)
	}
	slices.Sort(types)
	return RichResult{Main: r.Main, Dropped: &providers.DroppedResult{Types: types, Bytes: size}}
}

// boundResults returns list within limit (nil for none).
func boundResults(list []RichResult, limit int64) []RichResult {
	if len(list) == 0 {
		return nil
	}
	b := resultBudget{limit: limit}
	out := make([]RichResult, len(list))
	for i, r := range list {
		out[i] = b.take(r)
	}
	return out
}

// resultsSize is the size of the results' data (dropped ones count nothing: they keep none).
func resultsSize(list []RichResult) int64 {
	var n int64
	for _, r := range list {
		if r.Dropped == nil {
			n += r.Size()
		}
	}
	return n
}

// liveResults feeds the rich results of an execution into its liveOutput as they come,
// within the same bound as its Result's.
type liveResults struct {
	l *liveOutput

	mu     sync.Mutex
	budget resultBudget
}

func (lr *liveResults) add(r RichResult) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if data, err := json.Marshal(lr.budget.take(r)); err == nil {
		lr.l.append(StreamResult, data)
	}
}
