package sandbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// The folder operations (MakeDir, MoveFile, RemoveAll): the workspace itself and escapes are
// refused before anything; a session without a sandbox has nothing to move (not-found) or
// remove (no error); a provider without folder operations (providers.FileTree; the fake has
// none) answers fault.Capability, audited as a failure. What the operations do is pinned by
// sandboxd's and the E2B door's tests, on the providers that have them.
func TestFolderOperations(t *testing.T) {
	b := setup(t, sandboxtest.Options{})
	admin := b.Principal(t, "root")
	admin.Admin = true
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Name: "tree"})
	require.NoError(t, err)

	for _, p := range []string{"", ".", "a/.."} {
		requireKind(t, b.Service.MakeDir(b.ctx, b.alice, sess.ID, "", p), fault.Validation)
		requireKind(t, b.Service.RemoveAll(b.ctx, b.alice, sess.ID, "", p), fault.Validation)
		requireKind(t, b.Service.MoveFile(b.ctx, b.alice, sess.ID, "", "a", p), fault.Validation)
	}
	for _, p := range []string{"..", "../x", "/etc", "a\x00"} {
		requireKind(t, b.Service.MakeDir(b.ctx, b.alice, sess.ID, "", p), fault.Policy)
		requireKind(t, b.Service.MoveFile(b.ctx, b.alice, sess.ID, "", p, "a"), fault.Policy)
	}
	requireKind(t, b.Service.MakeDir(b.ctx, b.bob, sess.ID, "", "d"), fault.NotFound) // not bob's

	require.NoError(t, b.Service.RemoveAll(b.ctx, b.alice, sess.ID, "", "d"), "no sandbox: nothing to remove")
	requireKind(t, b.Service.MoveFile(b.ctx, b.alice, sess.ID, "", "a", "b"), fault.NotFound)

	requireKind(t, b.Service.MakeDir(b.ctx, b.alice, sess.ID, "", "d/e"), fault.Capability)
	events, _, err := b.Service.Audit(b.ctx, admin, sandbox.AuditQuery{SessionID: sess.ID, Limit: 10})
	require.NoError(t, err)
	require.NotEmpty(t, events)
	last := events[0]
	require.Equal(t, "file_write", last.Kind)
	require.Equal(t, "d/e", last.Target)
	require.Equal(t, "failed", last.Status)
	require.Equal(t, string(fault.Capability), last.ErrorType)
	moved := events[1]
	require.Equal(t, "file_write", moved.Kind, "a move is a removal and a write")
	require.Equal(t, "b", moved.Target)
	require.Equal(t, string(fault.NotFound), moved.ErrorType)
	require.Equal(t, "file_delete", events[2].Kind)
	require.Equal(t, "a", events[2].Target)
}
