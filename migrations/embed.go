// Package migrations embeds Sandgate's goose SQL migrations (applied by `gateway migrate`
// and at `serve` start under a Postgres advisory lock).
package migrations

import "embed"

// FS holds the *.sql migrations in version order.
//
//go:embed *.sql
var FS embed.FS
