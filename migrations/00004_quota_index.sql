-- +goose Up
-- Per-principal quotas count a principal's unfinished tasks on every submission.
CREATE INDEX tasks_owner_unfinished ON tasks (owner_id) WHERE finished_at IS NULL;

-- +goose Down
DROP INDEX tasks_owner_unfinished;
