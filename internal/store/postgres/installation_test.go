package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/store/postgres"
	"github.com/sandgate/sandgate/internal/testutil/pgtest"
)

// TestInstallationIsCreatedOnce: replicas starting together on an empty database each offer
// their own candidate; exactly one is recorded and every replica reads it, then and later. A
// database cloned from the migrated template has no installation of its own yet.
func TestInstallationIsCreatedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	const replicas = 8
	stores := make([]*postgres.Store, replicas)
	for i := range stores {
		st, err := postgres.Open(ctx, url, 2)
		require.NoError(t, err)
		t.Cleanup(st.Close)
		stores[i] = st
	}
	candidates := make([]string, replicas)
	got := make([]string, replicas)
	errs := make([]error, replicas)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range stores {
		candidates[i] = fmt.Sprintf("%016x", i+1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i], errs[i] = stores[i].Installation(ctx, candidates[i], time.Now())
		}()
	}
	close(start)
	wg.Wait()
	for i := range got {
		require.NoError(t, errs[i])
		assert.Equal(t, got[0], got[i], "replica %d", i)
	}
	assert.Contains(t, candidates, got[0], "one of the candidates won")

	again, err := stores[0].Installation(ctx, "ffffffffffffffff", time.Now())
	require.NoError(t, err)
	assert.Equal(t, got[0], again, "a later start keeps the recorded id")

	other, err := pgtest.Store(t).Installation(ctx, "eeeeeeeeeeeeeeee", time.Now())
	require.NoError(t, err)
	assert.Equal(t, "eeeeeeeeeeeeeeee", other, "another database is another installation")
}
