package account

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/principal"
	"github.com/sandgate/sandgate/internal/testutil/pgtest"
)

func TestPrincipalRecorderWritesOncePerInterval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := pgtest.Store(t)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := newPrincipalRecorder(st, func() time.Time { return now })
	p := principal.Principal{Issuer: "https://i", Subject: "alice", Username: "alice", Groups: []string{"dev"}}

	first, err := r.record(ctx, p)
	require.NoError(t, err)
	require.NotEmpty(t, first.ID)

	now = now.Add(30 * time.Second)
	again, err := r.record(ctx, p)
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)
	require.True(t, again.LastSeenAt.Equal(first.LastSeenAt), "within the interval nothing is written")

	// Two tokens of one subject with other groups, alternating: still one write an interval.
	other := p
	other.Groups = []string{"dev", "ml"}
	for i := range 10 {
		q := p
		if i%2 == 0 {
			q = other
		}
		got, err := r.record(ctx, q)
		require.NoError(t, err)
		require.True(t, got.LastSeenAt.Equal(first.LastSeenAt), "within the interval nothing is written, whatever the claims")
		require.Equal(t, q.Groups, got.Groups, "the request keeps its own token's groups")
	}
	p = other

	now = now.Add(2 * time.Minute)
	later, err := r.record(ctx, p)
	require.NoError(t, err)
	require.True(t, later.LastSeenAt.Equal(now), "after the interval last_seen_at moves")
	require.True(t, later.FirstSeenAt.Equal(first.FirstSeenAt))
}
