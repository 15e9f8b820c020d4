package gateway_test

import (
	"io/fs"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/gateway"
	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/testutil/pgtest"
	"github.com/sandgate/sandgate/migrations"
)

// gateway.Migrate (`gateway migrate`, the bench's fresh database) brings an empty database
// to the binary's schema, reports what it applied and the version, and applies nothing the
// second time.
func TestMigrateEmptyDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.URL(t)
	// Start from nothing: the test database is cloned from a migrated template.
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(ctx))

	sources, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	applied, version, err := gateway.Migrate(ctx, url)
	require.NoError(t, err)
	require.Len(t, applied, len(sources), "every migration, once")
	require.Equal(t, applied[len(applied)-1], version, "the schema is at the last one applied")

	again, same, err := gateway.Migrate(ctx, url)
	require.NoError(t, err)
	require.Empty(t, again)
	require.Equal(t, version, same)

	// The migrated schema is one a gateway serves on.
	e := gatewaytest.Start(t, gatewaytest.Options{DBURL: url})
	status, _, body := e.Do(http.MethodGet, "/v1/sessions", e.Token("after-migrate"), nil, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
}

// An unreachable database is an error, nothing else.
func TestMigrateUnreachableDatabase(t *testing.T) {
	t.Parallel()
	_, _, err := gateway.Migrate(t.Context(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
	require.Error(t, err)
}
