package quota

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/sandbox/clock"
	"github.com/sandgate/sandgate/internal/store"
)

func TestLimitsDefaultsNoneAndAdmins(t *testing.T) {
	t.Parallel()
	user, admin := principal.Principal{ID: "u", Issuer: "i", Subject: "u"}, principal.Principal{ID: "a", Issuer: "i", Subject: "a", Admin: true}

	r := New(Settings{Sessions: -1, Snapshots: 3, AdminsExempt: true}, nil, clock.System{}, slog.Default())
	assert.Equal(t, 0, r.Sessions(user), "a negative limit is none (0 in the store's form)")
	assert.Equal(t, 3, r.Snapshots(user))
	assert.Equal(t, 32, r.Executions(user), "zero takes the default")
	assert.EqualValues(t, DefaultSnapshotBytes, r.SnapshotBytes(user))
	assert.Equal(t, 0, r.Snapshots(admin), "admins are exempt when admins_exempt")
	assert.Equal(t, store.SnapshotLimits{Count: 3, Bytes: DefaultSnapshotBytes}, r.SnapshotLimits(user))

	strict := New(Settings{Snapshots: 3}, nil, clock.System{}, slog.Default())
	assert.Equal(t, 3, strict.Snapshots(admin), "admins count like anyone without admins_exempt")

	u := r.Usage(user, store.Held{Sessions: 7, Snapshots: 2, SnapshotBytes: 10})
	assert.Equal(t, Quota{Used: 7, Limit: -1}, u.Sessions, "no limit shows as -1")
	assert.Equal(t, Quota{Used: 2, Limit: 3}, u.Snapshots)
	assert.Equal(t, Quota{Used: 10, Limit: DefaultSnapshotBytes}, u.SnapshotBytes)

	err := r.SnapshotsErr(user)
	require.Equal(t, fault.Quota, fault.KindOf(err))
	assert.Contains(t, err.Error(), "sandbox.quotas.snapshots")
}

func TestMCPSessionsCountOpenOnesOnly(t *testing.T) {
	t.Parallel()
	p := principal.Principal{ID: "u", Issuer: "i", Subject: "u"}
	r := New(Settings{MCPSessions: 2}, nil, clock.System{}, slog.Default())
	open := map[int]bool{1: true, 2: true}
	release1, err := r.HoldMCPSession(p, func() bool { return open[1] })
	require.NoError(t, err)
	_, err = r.HoldMCPSession(p, func() bool { return open[2] })
	require.NoError(t, err)
	_, err = r.HoldMCPSession(p, func() bool { return true })
	require.Equal(t, fault.Quota, fault.KindOf(err), "the limit of open sessions is held")
	assert.Equal(t, 2, r.Usage(p, store.Held{}).MCPSessions.Used)

	open[2] = false // closed: stops counting the next time the count is taken
	release3, err := r.HoldMCPSession(p, func() bool { return true })
	require.NoError(t, err)
	release1()
	release3()
	assert.Equal(t, 0, r.Usage(p, store.Held{}).MCPSessions.Used)
}
