-- +goose Up
-- Secrets (issue 39; docs/semantics.md §18): named values a principal stores for its sessions,
-- which see only a placeholder; the egress proxy puts the value into requests to the secret's
-- hosts. A principal's secret is (principal_id, name). The value is kept sealed with
-- AES-256-GCM under the key named key_id (secrets.keys: the first key seals, every key
-- opens), the principal's id and the name bound as additional data, so a sealed value copied
-- to another row does not open; sealed is the 12-byte nonce followed by the ciphertext and
-- its tag. It is never read back over the API.
CREATE TABLE secrets (
    principal_id uuid NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
    name         text NOT NULL,
    hosts        text[] NOT NULL,
    key_id       text NOT NULL,
    sealed       bytea NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (principal_id, name)
);
-- Re-sealing under a new first key (gateway secrets reseal) finds the rows of older keys.
CREATE INDEX secrets_key ON secrets (key_id);

-- The secrets bound to a session: name → the placeholder its sandbox sees, random per session
-- and secret, kept so a sandbox attached again after a restart gets the same one.
ALTER TABLE sessions ADD COLUMN secrets jsonb NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE sessions DROP COLUMN secrets;
DROP TABLE secrets;
