-- +goose Up
-- The audit log (docs/semantics.md §14): who did what, kept for audit.retention whatever
-- happens to the sessions, tasks and principals it names (so no foreign keys). An execution's
-- event is inserted with its task and completed when the task finishes (task_id links them);
-- file writes and deletions and session creation and destruction are one event each.
CREATE TABLE audit_events (
    id           bigserial PRIMARY KEY,
    at           timestamptz NOT NULL,          -- when it happened (an execution: its submission)
    kind         text NOT NULL,                 -- execution | file_write | file_delete | session_create | session_destroy
    principal_id uuid NOT NULL,
    principal    text NOT NULL,                 -- "issuer#subject" at the time of the event
    session_id   text NOT NULL DEFAULT '',
    profile      text NOT NULL DEFAULT '',
    task_id      text,                          -- executions
    operation    text NOT NULL DEFAULT '',      -- execute_command | execute_code (executions)
    target       text NOT NULL DEFAULT '',      -- a file event's workspace path
    digest       text NOT NULL DEFAULT '',      -- SHA-256 (hex) of the command or code, or of a written file
    excerpt      text NOT NULL DEFAULT '',      -- the first bytes of the command or code
    size         bigint NOT NULL DEFAULT 0,     -- bytes of the command or code, or of a written file
    status       text NOT NULL,                 -- submitted, then the task's final status; succeeded | failed for other kinds
    error_type   text NOT NULL DEFAULT '',
    exit_code    integer,
    duration_ms  bigint,
    finished_at  timestamptz
);
CREATE UNIQUE INDEX audit_events_task ON audit_events (task_id) WHERE task_id IS NOT NULL;
CREATE INDEX audit_events_at ON audit_events (at);
CREATE INDEX audit_events_principal ON audit_events (principal_id, id DESC);
CREATE INDEX audit_events_session ON audit_events (session_id, id DESC) WHERE session_id <> '';

-- +goose Down
DROP TABLE audit_events;
