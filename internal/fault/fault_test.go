package fault_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sandgate/sandgate/internal/fault"
)

// The domain words the next step for each edge; each edge renders its own.
func TestHintsPerEdge(t *testing.T) {
	err := fault.New(fault.Conflict, "profile 'oneshot' has scope per_call").
		WithHint("use POST /v1/runs", "call run_command with profile='oneshot'")
	assert.Equal(t, "profile 'oneshot' has scope per_call; use POST /v1/runs", err.Error())
	wrapped := fmt.Errorf("resolving: %w", err)
	assert.Equal(t, "profile 'oneshot' has scope per_call; call run_command with profile='oneshot'", fault.ForTool(wrapped))
	assert.True(t, errors.Is(wrapped, fault.Conflict.Err()))

	plain := fault.New(fault.NotFound, "unknown sandbox session 'x'")
	assert.Equal(t, plain.Error(), fault.ForTool(plain), "no hint: the message alone")
	assert.Equal(t, "boom", fault.ForTool(errors.New("boom")))
}

// A paused session is a conflict with the resource's state, distinguishable as its own kind.
func TestPausedIsAConflict(t *testing.T) {
	err := fmt.Errorf("exec: %w", fault.New(fault.Paused, "sandbox session 's' is paused"))
	assert.Equal(t, fault.Paused, fault.KindOf(err))
	assert.True(t, fault.IsKind(err, fault.Paused))
	assert.True(t, fault.IsKind(err, fault.Conflict))
	assert.False(t, fault.IsKind(fault.New(fault.Conflict, "x"), fault.Paused))
}
