-- +goose Up
-- Per-session locks as tickets: executions and writes of one session run one at a time in
-- arrival order (ticket order) across replicas, without a connection held per lock. A ticket
-- counts while the replica that took it is present: holder_key is the bigint advisory lock
-- that replica's presence connection holds for its whole life, so Postgres itself drops a
-- dead replica's tickets from the queue the moment its connection ends.
CREATE TABLE session_locks (
    ticket     bigserial PRIMARY KEY,
    session_id text        NOT NULL,
    holder_key bigint      NOT NULL,
    token      text        NOT NULL UNIQUE, -- the holder's handle on its ticket
    taken_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX session_locks_session_ticket ON session_locks (session_id, ticket);

-- sandgate_holder_present tells whether the presence lock holder_key is held in this database.
-- pg_locks shows a bigint advisory key as its high half in classid, its low half in objid and
-- objsubid 1 (PostgreSQL manual, "pg_locks").
-- +goose StatementBegin
CREATE FUNCTION sandgate_holder_present(k bigint) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND objsubid = 1
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND classid = (k >> 32)::oid AND objid = (k & 4294967295)::oid)
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION sandgate_holder_present(bigint);
DROP TABLE session_locks;
