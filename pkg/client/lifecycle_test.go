package client_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/pkg/client"
)

// TestSnapshotsPauseAndLinks: a session's workspace is snapshotted, listed, restored into a
// new session and deleted; pausing on a provider that cannot is the capability problem; a
// port link is signed. Every answer is checked against the contract.
func TestSnapshotsPauseAndLinks(t *testing.T) {
	c := newClient(t, "snapper")
	ctx := t.Context()
	sid := newSession(t, c)
	_, err := c.Upload(ctx, sid, "kept.txt", strings.NewReader("kept"), 4)
	require.NoError(t, err)

	snap, err := c.CreateSnapshot(ctx, sid, "first")
	require.NoError(t, err)
	assert.Equal(t, sid, snap.SessionId)
	assert.Equal(t, "first", *snap.Name)
	list, err := c.Snapshots(ctx, &client.ListSnapshotsParams{SessionId: &sid})
	require.NoError(t, err)
	require.Len(t, list.Snapshots, 1)
	assert.Equal(t, snap.Id, list.Snapshots[0].Id)

	restored, err := c.CreateSession(ctx, client.CreateSessionRequest{FromSnapshot: &snap.Id})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = c.DeleteSession(t.Context(), restored.Id) })
	var got strings.Builder
	_, err = c.Download(ctx, restored.Id, "kept.txt", &got)
	require.NoError(t, err)
	assert.Equal(t, "kept", got.String())

	require.NoError(t, c.DeleteSnapshot(ctx, snap.Id))
	err = c.DeleteSnapshot(ctx, snap.Id)
	assert.True(t, client.IsKind(err, client.KindNotFound), "%v", err)

	_, err = c.Pause(ctx, sid)
	assert.True(t, client.IsKind(err, client.KindCapability), "the local provider cannot pause: %v", err)
	s, err := c.Resume(ctx, sid)
	require.NoError(t, err, "resuming a session that is not paused changes nothing")
	assert.NotEqual(t, client.SessionStatePaused, s.State)

	ttl := 120
	link, err := c.PortLink(ctx, sid, 8000, client.PortLinkRequest{TtlS: &ttl})
	require.NoError(t, err)
	assert.Equal(t, 8000, link.Port)
	assert.Equal(t, sid, link.SessionId)
	assert.False(t, link.Personal)
	assert.Contains(t, link.Url, "/preview/")
}
