package gateway

import (
	"context"
	"errors"

	"github.com/sandgate/sandgate/internal/providers/docker"
)

// censusTaker is a provider that counts what its engine holds of every installation (docker).
type censusTaker interface {
	Census(ctx context.Context) (docker.Census, error)
}

// EngineCensus counts, on each Docker engine the gateway's profiles use (once per engine
// address), Sandgate's objects by installation, so that the caller can say when the engine is
// shared with other installations (see docker.Census.Others). It reads labels only. Engines
// that do not answer are left out and their errors joined.
func (g *Gateway) EngineCensus(ctx context.Context) ([]docker.Census, error) {
	var out []docker.Census
	var errs []error
	seen := map[string]bool{}
	for _, e := range g.engines {
		c, err := e.Census(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[c.Engine] {
			continue
		}
		seen[c.Engine] = true
		out = append(out, c)
	}
	return out, errors.Join(errs...)
}
