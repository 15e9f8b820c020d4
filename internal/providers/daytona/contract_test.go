package daytona_test

import (
	"testing"
	"time"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/daytona"
	"github.com/sandgate/sandgate/internal/providers/daytona/daytonafake"
	"github.com/sandgate/sandgate/internal/providers/providertest"
)

// contractSkips are the suite's tests that Daytona's API cannot pass, with why. They are
// skipped against the fake too, which plays Daytona as it is; TestLive uses the same list.
var contractSkips = map[string]string{
	"exec/exit_codes_and_signals":                   "Daytona reports a command's exit code only (128+n after signal n), never the signal's name (TestExitCodes covers the codes)",
	"exec/non_utf8_output_is_kept":                  "Daytona's daemon reads a command's output line by line with the shell's read, which drops NUL bytes",
	"exec/working_folder_is_confined":               "paths are confined lexically only: Daytona's toolbox follows symlinks inside the sandbox (TestWorkingFolder covers the lexical rules)",
	"files/symlink_escapes_are_policy_errors":       "paths are confined lexically only: Daytona's toolbox follows symlinks inside the sandbox, which is the caller's own container",
	"tree/tree_symlink_escapes_are_policy_errors":   "paths are confined lexically only: Daytona's toolbox follows symlinks inside the sandbox, which is the caller's own container",
	"files/list_reports_symlinks_without_following": "Daytona's toolbox describes each entry after following symlinks (and leaves dangling links out)",
	"stateful/crash_is_reported_and_replaced":       "Daytona's interpreter does not report the exit status of an interpreter that died (TestContexts covers the loss and the fresh context)",
	"processes/cell_children_end_with_the_cell":     "Daytona's interpreter is its own long-lived process, which nothing says ends what a cell starts (the fake's sandboxd contexts do, so passing here would say nothing of Daytona)",
}

// TestContract runs the contract suite against the fake, one fake and provider per test.
func TestContract(t *testing.T) {
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) providers.Provider {
			return newProvider(t, daytonafake.New(t), daytona.Options{})
		},
		Skip:      contractSkips,
		KillGrace: 2 * time.Second,
	})
}
