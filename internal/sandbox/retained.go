package sandbox

import "github.com/sandgate/sandgate/internal/sandbox/upkeep"

// Retained output over sandbox.quotas.retained_output_bytes is trimmed in the background by
// the upkeep room (upkeep.Trimmer): the oldest results lose their output.

// droppedNotice tells the reader of a result whose output was dropped why it is empty.
const droppedNotice = upkeep.DroppedNotice

// outputBytes is how many bytes of output res keeps (its stored stdout and stderr, and its
// rich results' data).
func outputBytes(res *Result) int64 {
	if res == nil {
		return 0
	}
	return int64(len(res.Stdout)+len(res.Stderr)) + resultsSize(res.Results)
}
