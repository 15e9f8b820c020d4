package sandbox_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// docs/semantics.md §14: every execution, file write and session change is audited per
// principal; only administrators read the log; events older than the retention go.

func hexSHA(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestAuditRecordsWhoDidWhat(t *testing.T) {
	b := setup(t, sandboxtest.Options{})
	admin := b.Principal(t, "root")
	admin.Admin = true

	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Name: "a"})
	require.NoError(t, err)
	res := b.exec(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: "echo hi"})
	require.NotNil(t, res.ExitCode)
	_, err = b.Service.WriteFile(b.ctx, b.alice, sess.ID, "", "in/data.txt", strings.NewReader("hello"), 5)
	require.NoError(t, err)
	require.NoError(t, b.Service.DeleteFile(b.ctx, b.alice, sess.ID, "", "in/data.txt"))
	b.exec(t, b.bob, sandbox.ExecInput{SessionID: sandbox.DefaultSessionID, Code: "print(1)"}) // bob's default session is made
	_, err = b.Service.DestroySession(b.ctx, b.alice, sess.ID, "")
	require.NoError(t, err)

	events, next, err := b.Service.Audit(b.ctx, admin, sandbox.AuditQuery{Limit: 50})
	require.NoError(t, err)
	require.Empty(t, next)
	var kinds []string
	for _, e := range events {
		kinds = append(kinds, e.Kind+"/"+strings.TrimPrefix(e.Principal, sandboxtest.Issuer+"#"))
	}
	require.Equal(t, []string{
		"session_destroy/alice", "execution/bob", "session_create/bob", "file_delete/alice", "file_write/alice",
		"execution/alice", "session_create/alice",
	}, kinds, "newest first")

	exec := events[5]
	require.Equal(t, sess.ID, exec.SessionID)
	require.Equal(t, "default", exec.Profile)
	require.Equal(t, sandbox.OpExecuteCode, exec.Operation)
	require.Equal(t, hexSHA("echo hi"), exec.Digest)
	require.Equal(t, "echo hi", exec.Excerpt)
	require.Equal(t, "succeeded", exec.Status)
	require.Equal(t, *res.ExitCode, *exec.ExitCode)
	require.NotNil(t, exec.DurationMS)
	require.Equal(t, res.TaskID, exec.TaskID)
	require.Equal(t, b.alice.ID, exec.PrincipalID)

	write := events[4]
	require.Equal(t, "in/data.txt", write.Target)
	require.Equal(t, hexSHA("hello"), write.Digest)
	require.EqualValues(t, 5, write.Size)
	require.Equal(t, "succeeded", write.Status)

	// Filters: one principal, one session, one kind.
	mine, _, err := b.Service.Audit(b.ctx, admin, sandbox.AuditQuery{Principal: b.bob.Key(), Limit: 50})
	require.NoError(t, err)
	require.Len(t, mine, 2)
	inSession, _, err := b.Service.Audit(b.ctx, admin, sandbox.AuditQuery{SessionID: sess.ID, Kind: "file_write", Limit: 50})
	require.NoError(t, err)
	require.Len(t, inSession, 1)

	// Paging.
	page, next, err := b.Service.Audit(b.ctx, admin, sandbox.AuditQuery{Limit: 4})
	require.NoError(t, err)
	require.Len(t, page, 4)
	require.NotEmpty(t, next)
	rest, last, err := b.Service.Audit(b.ctx, admin, sandbox.AuditQuery{Limit: 4, Cursor: next})
	require.NoError(t, err)
	require.Len(t, rest, 3)
	require.Empty(t, last)
	require.Equal(t, events[4].ID, rest[0].ID)

	_, _, err = b.Service.Audit(b.ctx, admin, sandbox.AuditQuery{Limit: 4, Cursor: "nonsense"})
	require.True(t, fault.IsKind(err, fault.Validation), "%v", err)
	_, _, err = b.Service.Audit(b.ctx, b.alice, sandbox.AuditQuery{Limit: 4})
	require.True(t, fault.IsKind(err, fault.Forbidden), "only admins: %v", err)
}

func TestAuditFailedWriteIsRecorded(t *testing.T) {
	b := setup(t, sandboxtest.Options{Settings: sandbox.Settings{MaxFileBytes: 4}})
	admin := b.alice
	admin.Admin = true
	sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{})
	require.NoError(t, err)
	_, err = b.Service.WriteFile(b.ctx, b.alice, sess.ID, "", "big.bin", strings.NewReader("too long"), -1)
	require.True(t, fault.IsKind(err, fault.TooLarge), "%v", err)
	events, _, err := b.Service.Audit(b.ctx, admin, sandbox.AuditQuery{Kind: "file_write", Limit: 5})
	require.NoError(t, err)
	require.Len(t, events, 1)
	require.Equal(t, "failed", events[0].Status)
	require.Equal(t, string(fault.TooLarge), events[0].ErrorType)
	require.Empty(t, events[0].Digest, "nothing was written")
	require.Zero(t, events[0].Size)
}

func TestAuditRetention(t *testing.T) {
	b := setup(t, sandboxtest.Options{Settings: sandbox.Settings{AuditRetention: 48 * time.Hour}})
	admin := b.alice
	admin.Admin = true
	_, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Name: "old"})
	require.NoError(t, err)
	b.Clock.Advance(47 * time.Hour)
	_, err = b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{Name: "new"})
	require.NoError(t, err)
	b.Service.SweepNow(b.ctx)
	events, _, err := b.Service.Audit(b.ctx, admin, sandbox.AuditQuery{Limit: 5})
	require.NoError(t, err)
	require.Len(t, events, 2, "nothing is older than the retention yet")

	b.Clock.Advance(2 * time.Hour)
	b.Service.SweepNow(b.ctx)
	events, _, err = b.Service.Audit(b.ctx, admin, sandbox.AuditQuery{Limit: 5})
	require.NoError(t, err)
	require.Len(t, events, 1, "the first event is 49 h old, past the 48 h retention")
	require.Equal(t, b.Clock.Now().Add(-2*time.Hour).Unix(), events[0].At.Unix())
}
