package web_test

import (
	"os"
	"testing"

	"github.com/sandgate/sandgate/internal/testutil/dockertest"
)

// TestMain fails the package when Docker objects of its gateways' installations are left on
// the engine.
func TestMain(m *testing.M) { os.Exit(dockertest.CheckAfter(m).Run()) }
