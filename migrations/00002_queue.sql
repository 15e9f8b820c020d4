-- +goose Up
-- Queue flavor: tasks keep their submission order per session (seq), whether they travel
-- through a queue (queued), and how many times they started executing (attempts, capped by
-- sandbox.broker.queue.max_receive_count).
ALTER TABLE tasks ADD COLUMN seq bigserial;
ALTER TABLE tasks ADD COLUMN queued boolean NOT NULL DEFAULT false;
ALTER TABLE tasks ADD COLUMN attempts integer NOT NULL DEFAULT 0;
CREATE INDEX tasks_session_seq_unfinished ON tasks (session_id, seq) WHERE finished_at IS NULL;

-- +goose Down
DROP INDEX tasks_session_seq_unfinished;
ALTER TABLE tasks DROP COLUMN attempts;
ALTER TABLE tasks DROP COLUMN queued;
ALTER TABLE tasks DROP COLUMN seq;
