package execute

import (
	"slices"

	"github.com/sandgate/sandgate/internal/providers"
)

// Rich results are bounded like each output stream: together within sandbox.max_output_bytes
// (RichResult.Size), a result that does not fit what is left being dropped whole and named
// (RichResult.Dropped) — never cut — while later, smaller ones still fit. The provider is
// asked for the same bound (providers.ExecSpec.MaxResultBytes); the domain holds every
// provider to it.

// Budget keeps results within a limit (NewBudget); the zero Budget keeps none.
type Budget struct {
	limit, used int64
}

// NewBudget is a Budget of limit bytes.
func NewBudget(limit int64) Budget { return Budget{limit: limit} }

// Take returns r as it is kept: itself, or its dropped form when it does not fit.
func (b *Budget) Take(r RichResult) RichResult {
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

// BoundResults returns list within limit (nil for none).
func BoundResults(list []RichResult, limit int64) []RichResult {
	if len(list) == 0 {
		return nil
	}
	b := NewBudget(limit)
	out := make([]RichResult, len(list))
	for i, r := range list {
		out[i] = b.Take(r)
	}
	return out
}

// ResultsSize is the size of the results' data (dropped ones count nothing: they keep none).
func ResultsSize(list []RichResult) int64 {
	var n int64
	for _, r := range list {
		if r.Dropped == nil {
			n += r.Size()
		}
	}
	return n
}
