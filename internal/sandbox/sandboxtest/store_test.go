package sandboxtest_test

import (
	"testing"

	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
	"github.com/sandgate/sandgate/internal/store/storetest"
)

// The memory store passes the conformance suite the Postgres store passes.
func TestStoreConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(*testing.T) sandbox.Store { return sandboxtest.NewStore() })
}
