package sandbox

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/store"
)

// A queued execution refused by the contexts quota on its worker reaches its caller as a
// quota with Retry-After; kinds a worker cannot mean (internal, unknown) are broker.
func TestFailureOfQueuedTask(t *testing.T) {
	t.Parallel()
	err := failureOf(Task{Task: store.Task{ErrorType: string(fault.Quota), Error: "you hold 2 named contexts"}})
	var fe *fault.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, fault.Quota, fe.Kind)
	assert.Equal(t, contextRetry, fe.RetryAfter)
	assert.Equal(t, fault.Broker, fault.KindOf(failureOf(Task{Task: store.Task{ErrorType: string(fault.Internal)}})))
	assert.Equal(t, fault.Policy, fault.KindOf(failureOf(Task{Task: store.Task{ErrorType: string(fault.Policy)}})))
}
