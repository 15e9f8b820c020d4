package gatewaytest

import (
	"context"
	"fmt"
	"time"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store"
	"github.com/sandgate/sandgate/internal/store/postgres"
)

// The functions of this file read a gateway's database for programs that share it without
// being a gateway — the bench, which runs gateways as child processes and cleans up after
// them — through the Postgres store's own statements, so no one but the store writes SQL
// against its tables.

// Installation returns the installation id of the migrated database at url (what the
// sandboxes, pools and snapshots of its gateways are labelled with). When no gateway has
// recorded one yet it records a fresh one, as the first gateway would, and every gateway on
// the database then takes that one. Errors: the database unreachable or not migrated.
func Installation(ctx context.Context, url string) (string, error) {
	st, err := postgres.Open(ctx, url, 1)
	if err != nil {
		return "", err
	}
	defer st.Close()
	return st.Installation(ctx, providers.NewInstallationID(), time.Now())
}

// sandboxesPage is how many sessions Sandboxes reads per statement.
const sandboxesPage = 500

// Sandboxes returns the ids of the sandboxes that sessions of provider type typ (e.g.
// docker.TypeName) in the database at url still name, closed sessions included: what a run
// that stopped half-way may have left on the provider. Errors: the database unreachable or
// not migrated.
func Sandboxes(ctx context.Context, url, typ string) ([]string, error) {
	st, err := postgres.Open(ctx, url, 1)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var ids []string
	f := store.SessionFilter{All: true, Limit: sandboxesPage}
	for {
		page, err := st.ListSessions(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("gatewaytest: list sessions: %w", err)
		}
		for _, s := range page {
			if s.Provider == typ && s.SandboxID != "" {
				ids = append(ids, s.SandboxID)
			}
		}
		if len(page) < f.Limit {
			return ids, nil
		}
		last := page[len(page)-1]
		f.AfterCreated, f.AfterID = last.CreatedAt, last.ID
	}
}
