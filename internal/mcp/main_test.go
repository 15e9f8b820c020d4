package mcp_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind (a gateway not closed, a
// response body not drained).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
