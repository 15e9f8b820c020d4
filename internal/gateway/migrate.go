package gateway

import (
	"context"

	"github.com/sandgate/sandgate/internal/store/postgres"
)

// Migrate applies the pending migrations of /migrations to the database at url (a postgres://
// URL or libpq key/value string) and returns the versions it applied and the version the
// schema is at now; `gateway migrate` and the benchmark's fresh database use it. Concurrent
// callers, and gateways starting with database.auto_migrate, serialise on a Postgres
// advisory lock, so each migration runs once. Errors: the database unreachable, or a
// migration failing (the ones before it stay applied).
func Migrate(ctx context.Context, url string) (applied []int64, version int64, err error) {
	st, err := postgres.Open(ctx, url, 2)
	if err != nil {
		return nil, 0, err
	}
	defer st.Close()
	if applied, err = st.Migrate(ctx); err != nil {
		return nil, 0, err
	}
	if version, _, err = st.SchemaVersion(ctx); err != nil {
		return nil, 0, err
	}
	return applied, version, nil
}
