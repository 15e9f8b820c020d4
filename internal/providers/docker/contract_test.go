package docker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/docker"
	"github.com/sandgate/sandgate/internal/providers/providertest"
)

// TestContract runs the contract suite on sandboxes taken from a warm pool where one is ready
// (which also puts pooled containers through the whole suite) and fresh ones otherwise.
func TestContract(t *testing.T) {
	requireEngine(t)
	p := newProvider(t, func(o *docker.Options) {
		o.Config.WarmPoolSize = 2
		o.PoolRefillInterval = time.Second
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = p.Close()
		assert.NoError(t, p.DrainPool(ctx))
	})
	providertest.Run(t, providertest.Harness{
		New:         func(*testing.T) providers.Provider { return p },
		KillGrace:   testGrace,
		RichResults: true,
	})
}
