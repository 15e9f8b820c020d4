package memory_test

import (
	"testing"

	"github.com/sandgate/sandgate/internal/store"
	"github.com/sandgate/sandgate/internal/store/memory"
	"github.com/sandgate/sandgate/internal/store/storetest"
)

// The memory store passes the conformance suite the Postgres store passes.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(*testing.T) store.Store { return memory.New() })
}
