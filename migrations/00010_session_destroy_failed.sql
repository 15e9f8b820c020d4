-- +goose Up
-- A session whose sandbox the provider failed to destroy is kept, closed for new work
-- (status 'closed'; its API state destroy_failed), until the sweeper's retries (or the owner's
-- repeated DELETE) remove its sandbox and the row with it: no sandbox is left that no session
-- points to. destroy_attempts counts the failed attempts, destroy_retry_at is when the next
-- retry is due, destroy_error is the provider's last answer.
ALTER TABLE sessions
    ADD COLUMN destroy_attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN destroy_retry_at timestamptz,
    ADD COLUMN destroy_error    text;

-- A closed session is no longer its owner's default, nor its profile's shared session: the
-- next use of `default` makes a new one beside it.
DROP INDEX sessions_default_per_owner;
CREATE UNIQUE INDEX sessions_default_per_owner ON sessions (owner_id, profile)
    WHERE is_default AND owner_id IS NOT NULL AND status <> 'closed';
DROP INDEX sessions_runtime_per_profile;
CREATE UNIQUE INDEX sessions_runtime_per_profile ON sessions (profile)
    WHERE owner_id IS NULL AND status <> 'closed';

CREATE INDEX sessions_destroy_retry ON sessions (destroy_retry_at) WHERE status = 'closed';

-- +goose Down
-- Closed rows go (their sandboxes are left to the orphan sweep): the old indexes allow one
-- default per owner and profile whatever its status.
DELETE FROM sessions WHERE status = 'closed';
DROP INDEX sessions_destroy_retry;
DROP INDEX sessions_runtime_per_profile;
CREATE UNIQUE INDEX sessions_runtime_per_profile ON sessions (profile) WHERE owner_id IS NULL;
DROP INDEX sessions_default_per_owner;
CREATE UNIQUE INDEX sessions_default_per_owner ON sessions (owner_id, profile) WHERE is_default AND owner_id IS NOT NULL;
ALTER TABLE sessions
    DROP COLUMN destroy_attempts,
    DROP COLUMN destroy_retry_at,
    DROP COLUMN destroy_error;
