package sandbox

import (
	"encoding/json"
	"sync"

	"github.com/sandgate/sandgate/internal/sandbox/execute"
)

// StreamResult is the stream of an execution's live output that carries its rich results,
// one event (the result's JSON) each, in order with its stdout and stderr. Its offsets count
// the bytes of the results' JSON before it; a result is never split between events.
const StreamResult = "result"

// resultsSize is the size of the results' data (execute.ResultsSize).
func resultsSize(list []RichResult) int64 { return execute.ResultsSize(list) }

// liveResults feeds the rich results of an execution into its liveOutput as they come,
// within the same bound as its Result's.
type liveResults struct {
	l *liveOutput

	mu     sync.Mutex
	budget execute.Budget
}

func (lr *liveResults) add(r RichResult) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if data, err := json.Marshal(lr.budget.Take(r)); err == nil {
		lr.l.append(StreamResult, data)
	}
}
