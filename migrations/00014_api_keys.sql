-- +goose Up
-- API keys (docs/semantics.md §1 API key): credentials a signed-in principal makes for
-- scripts, CI jobs and servers. Only the SHA-256 of a key's secret is kept (secret_hash,
-- unique: a request with a key is one read of that index); prefix is the secret's first
-- characters, not secret, shown to tell keys apart. A key authenticates as the identity its
-- maker had when it was made — issuer and subject, username, email, groups and user-mode
-- credentials, kept here — restricted to profiles when that list is set. Keys that were
-- revoked or expired are kept (listed as such) until the sweeper deletes them.
CREATE TABLE api_keys (
    id           text PRIMARY KEY,
    principal_id uuid NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
    name         text NOT NULL,
    prefix       text NOT NULL,
    secret_hash  bytea NOT NULL,
    issuer       text NOT NULL,
    subject      text NOT NULL,
    username     text NOT NULL DEFAULT '',
    email        text NOT NULL DEFAULT '',
    groups       text[] NOT NULL DEFAULT '{}',
    credentials  jsonb NOT NULL DEFAULT '{}',
    profiles     text[],                        -- NULL: every profile its principal may use
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    last_used_at timestamptz,                   -- written at most once a minute
    revoked_at   timestamptz,
    revoked_by   uuid                           -- the principal who revoked it
);
CREATE UNIQUE INDEX api_keys_secret ON api_keys (secret_hash);
CREATE INDEX api_keys_principal ON api_keys (principal_id, created_at DESC, id DESC);
CREATE INDEX api_keys_created ON api_keys (created_at DESC, id DESC);
CREATE INDEX api_keys_expires ON api_keys (expires_at);
CREATE INDEX api_keys_revoked ON api_keys (revoked_at) WHERE revoked_at IS NOT NULL;

-- The API key a request authenticated with, on the audit events it made ('' for a token).
ALTER TABLE audit_events ADD COLUMN api_key_id text NOT NULL DEFAULT '';
CREATE INDEX audit_events_api_key ON audit_events (api_key_id, id DESC) WHERE api_key_id <> '';

-- +goose Down
DROP INDEX audit_events_api_key;
ALTER TABLE audit_events DROP COLUMN api_key_id;
DROP TABLE api_keys;
