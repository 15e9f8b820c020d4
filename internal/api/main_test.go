package api_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sandgate/sandgate/internal/testutil/dockertest"
)

// TestMain fails the package when a test leaves a goroutine behind (a gateway not closed, a
// response body not drained), or Docker objects of its gateways' installations on the engine.
func TestMain(m *testing.M) { goleak.VerifyTestMain(dockertest.CheckAfter(m)) }
