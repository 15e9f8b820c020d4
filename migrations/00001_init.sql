-- +goose Up
-- Principals seen by the gateway: one row per (issuer, subject).
CREATE TABLE principals (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    issuer        text NOT NULL,
    subject       text NOT NULL,
    username      text NOT NULL DEFAULT '',
    email         text NOT NULL DEFAULT '',
    groups        text[] NOT NULL DEFAULT '{}',
    first_seen_at timestamptz NOT NULL,
    last_seen_at  timestamptz NOT NULL,
    UNIQUE (issuer, subject)
);

-- Sandbox sessions. owner_id is NULL for the shared session of a per_runtime profile.
CREATE TABLE sessions (
    id             text PRIMARY KEY,
    owner_id       uuid REFERENCES principals (id) ON DELETE CASCADE,
    profile        text NOT NULL,
    provider       text NOT NULL,
    scope          text NOT NULL,
    name           text NOT NULL DEFAULT '',
    labels         jsonb NOT NULL DEFAULT '{}',
    is_default     boolean NOT NULL DEFAULT false,
    sandbox_id     text,
    status         text NOT NULL DEFAULT 'active',
    -- A notice to deliver with the session's next operation (e.g. the idle sweeper reset it).
    pending_notice text,
    created_at     timestamptz NOT NULL,
    last_used_at   timestamptz NOT NULL
);
CREATE UNIQUE INDEX sessions_default_per_owner ON sessions (owner_id, profile) WHERE is_default AND owner_id IS NOT NULL;
CREATE UNIQUE INDEX sessions_runtime_per_profile ON sessions (profile) WHERE owner_id IS NULL;
CREATE INDEX sessions_owner_created ON sessions (owner_id, created_at DESC, id DESC);
CREATE INDEX sessions_idle ON sessions (last_used_at) WHERE sandbox_id IS NOT NULL;

-- Gateway replicas (and later workers) that run operations; heartbeats tell live from dead.
CREATE TABLE runners (
    id           text PRIMARY KEY,
    hostname     text NOT NULL DEFAULT '',
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL
);

-- Executions. Every execution is recorded; promoted ones are the background tasks callers poll.
CREATE TABLE tasks (
    id               text PRIMARY KEY,
    session_id       text NOT NULL,
    owner_id         uuid NOT NULL REFERENCES principals (id) ON DELETE CASCADE,
    profile          text NOT NULL,
    operation        text NOT NULL,
    status           text NOT NULL,
    promoted         boolean NOT NULL DEFAULT false,
    runner_id        text NOT NULL,
    submitted_at     timestamptz NOT NULL,
    started_at       timestamptz,
    finished_at      timestamptz,
    expires_at       timestamptz,
    notice           text,
    error            text,
    error_type       text,
    result           jsonb,
    cancel_requested boolean NOT NULL DEFAULT false
);
CREATE INDEX tasks_owner_submitted ON tasks (owner_id, submitted_at DESC, id DESC);
CREATE INDEX tasks_unfinished ON tasks (runner_id) WHERE finished_at IS NULL;
CREATE INDEX tasks_session_unfinished ON tasks (session_id) WHERE finished_at IS NULL;
CREATE INDEX tasks_expiry ON tasks (expires_at) WHERE expires_at IS NOT NULL;

-- +goose Down
DROP TABLE tasks;
DROP TABLE runners;
DROP TABLE sessions;
DROP TABLE principals;
