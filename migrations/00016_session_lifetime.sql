-- +goose Up
-- A session may be given a lifetime (docs/semantics.md §8 "Lifetime"): expires_at is when it
-- ends, NULL for never (every session made before this column). on_expiry says what ends
-- it: 'destroy' (the session and its sandbox go, as DELETE does) or 'pause' (its sandbox is
-- paused and its expiry cleared: a resume gives it a new one). The sweeper reads the sessions
-- whose time has come through sessions_expiry.
--
-- env is the session's environment: variables every program of the session gets (an
-- execution's own win), given when it was made (the E2B door's envVars). Kept like the rest of
-- the row, never shown by the API.
ALTER TABLE sessions
    ADD COLUMN expires_at timestamptz,
    ADD COLUMN on_expiry  text NOT NULL DEFAULT 'destroy',
    ADD COLUMN env        jsonb NOT NULL DEFAULT '{}';

CREATE INDEX sessions_expiry ON sessions (expires_at) WHERE expires_at IS NOT NULL AND status <> 'closed';

-- +goose Down
DROP INDEX sessions_expiry;
ALTER TABLE sessions
    DROP COLUMN expires_at,
    DROP COLUMN on_expiry,
    DROP COLUMN env;
