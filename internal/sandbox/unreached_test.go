package sandbox_test

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// A provider may hand out a handle it trusts without a round trip; when the sandbox behind it
// could not be reached (providers.ErrUnreached: nothing ran), the execution attaches again —
// the ordinary path, which would recreate a vanished sandbox with its notice (tested with
// Lose elsewhere) — and runs once more.
func TestUnreachedSandboxIsAttachedAgain(t *testing.T) {
	b := setup(t, sandboxtest.Options{})
	prov := b.Provider(t, "default")
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Profile: "default"})
	require.NoError(t, err)
	first := b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
	require.Empty(t, first.Notice)
	sandboxID := prov.Created()[0]

	// Reachable again on the second try (a restarted sandboxd that now has its token).
	unreached := func(context.Context, *sandboxtest.Run) (providers.ExitStatus, error) {
		return providers.ExitStatus{}, fault.Wrap(fault.Provision, providers.ErrUnreached, "fake: could not connect")
	}
	ok := func(_ context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
		_, _ = io.WriteString(r.Stdout, "ran")
		return providers.ExitStatus{}, nil
	}
	prov.Next(unreached, ok)
	r := b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
	require.Equal(t, "ran", r.Stdout)
	require.Empty(t, r.Notice, "the same sandbox, reached on the second attach")
	require.Equal(t, []string{sandboxID}, prov.Created())

	// Unreached twice: an error, not a loop.
	prov.Next(unreached, unreached)
	_, err = b.Service.Execute(b.ctx, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "x"})
	requireKind(t, err, fault.Provision)
}
