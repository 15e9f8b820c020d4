-- +goose Up
-- A session's sandbox can be paused (frozen in place: POST /v1/sessions/{id}/pause, or an
-- idle profile with idle_action pause, paused_idle) or parked in a snapshot while it has no
-- sandbox (idle_action snapshot): the next use restores the snapshot parked_snapshot names.
ALTER TABLE sessions ADD COLUMN paused_at timestamptz;
ALTER TABLE sessions ADD COLUMN paused_idle boolean NOT NULL DEFAULT false;
ALTER TABLE sessions ADD COLUMN parked_snapshot text;

-- Snapshots of sandboxes: the provider's capture (ref: an image, a folder) with where it came
-- from. owner_id is NULL for a capture of a shared per_runtime session parked when idle.
-- kind 'user' counts against sandbox.quotas.snapshots; 'idle' captures park an idle session
-- and go once it is restored or destroyed.
CREATE TABLE snapshots (
    id         text PRIMARY KEY,
    owner_id   uuid REFERENCES principals (id) ON DELETE CASCADE,
    session_id text NOT NULL,
    profile    text NOT NULL,
    provider   text NOT NULL,
    name       text NOT NULL DEFAULT '',
    kind       text NOT NULL DEFAULT 'user',
    ref        text NOT NULL,
    size_bytes bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL
);
CREATE INDEX snapshots_owner_created ON snapshots (owner_id, created_at DESC, id DESC);

-- Keys the gateway signs with (share links of preview ports), one row per purpose, made by
-- the first replica that needs one and shared by all.
CREATE TABLE signing_keys (
    name       text PRIMARY KEY,
    key        bytea NOT NULL,
    created_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE signing_keys;
DROP TABLE snapshots;
ALTER TABLE sessions DROP COLUMN parked_snapshot;
ALTER TABLE sessions DROP COLUMN paused_idle;
ALTER TABLE sessions DROP COLUMN paused_at;
