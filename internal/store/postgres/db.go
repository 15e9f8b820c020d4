package postgres

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandgate/sandgate/internal/fault"
)

// db is the pool every statement of the Store goes through: the same pool, whose errors of
// an unreachable database come back as fault.Unavailable (so the API answers 503 with
// Retry-After, not 500). Errors of the statements themselves, and the caller's context ending,
// stay as they are.
type db struct{ *pgxpool.Pool }

// Unavailable reports whether err means the database cannot be reached or its connection
// broke: a failed connect, a network error, a connection closed under the statement, or the
// server shutting down or refusing connections (SQLSTATE classes 57P and 53300).
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "53300": // admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections
			return true
		}
		return false
	}
	var connect *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connect) || errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || pgconn.SafeToRetry(err)
}

// classified is err as fault.Unavailable when Unavailable(err), else err.
func classified(err error) error {
	var fe *fault.Error
	if !Unavailable(err) || errors.As(err, &fe) {
		return err
	}
	return fault.Wrap(fault.Unavailable, err, "the response store (Postgres) does not answer; retry shortly")
}

func (d db) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := d.Pool.Exec(ctx, sql, args...)
	return tag, classified(err)
}

func (d db) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := d.Pool.Query(ctx, sql, args...)
	if err != nil {
		return rows, classified(err)
	}
	return classifiedRows{rows}, nil
}

func (d db) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return classifiedRow{d.Pool.QueryRow(ctx, sql, args...)}
}

func (d db) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return classifiedBatch{d.Pool.SendBatch(ctx, b)}
}

func (d db) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := d.Pool.Begin(ctx)
	return tx, classified(err)
}

type classifiedRow struct{ pgx.Row }

func (r classifiedRow) Scan(dest ...any) error { return classified(r.Row.Scan(dest...)) }

type classifiedRows struct{ pgx.Rows }

func (r classifiedRows) Err() error { return classified(r.Rows.Err()) }

type classifiedBatch struct{ pgx.BatchResults }

func (b classifiedBatch) Close() error { return classified(b.BatchResults.Close()) }
