-- +goose Up
-- Per-principal quotas on stateful contexts and retained output (sandbox.quotas).

-- The bytes of stdout and stderr a finished task's result keeps; 0 once they were dropped to
-- keep its owner within retained_output_bytes. The index serves the per-owner sum and the
-- drop of the oldest.
ALTER TABLE tasks ADD COLUMN output_bytes bigint NOT NULL DEFAULT 0;
CREATE INDEX tasks_owner_retained ON tasks (owner_id, finished_at DESC, id DESC) INCLUDE (output_bytes)
    WHERE output_bytes > 0;

-- Named stateful contexts, one row per (session, name), written when a replica first sees a
-- name in use (not per execution). A row counts while its sandbox is still its session's;
-- rows of a replaced sandbox are swept, and a destroyed session takes its rows along.
CREATE TABLE contexts (
    session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    name       text NOT NULL,
    sandbox_id text NOT NULL,
    owner_id   uuid NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (session_id, name)
);
CREATE INDEX contexts_owner ON contexts (owner_id);

-- +goose Down
DROP TABLE contexts;
DROP INDEX tasks_owner_retained;
ALTER TABLE tasks DROP COLUMN output_bytes;
