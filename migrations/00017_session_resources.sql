-- +goose Up
-- A session may ask for less CPU and memory than its profile's policy allows (POST
-- /v1/sessions cpu, memory_mb; NULL: the profile's). Its sandboxes are created, attached
-- and restored with the policy so lowered.
--
-- Sessions are listed by label selectors (GET /v1/sessions?label=k=v: labels @> '{…}'); the
-- GIN index answers containment without reading every session of an administrator's
-- all=true list.
ALTER TABLE sessions
    ADD COLUMN cpu       double precision,
    ADD COLUMN memory_mb integer;

CREATE INDEX sessions_labels ON sessions USING gin (labels jsonb_path_ops);

-- +goose Down
DROP INDEX sessions_labels;
ALTER TABLE sessions
    DROP COLUMN cpu,
    DROP COLUMN memory_mb;
