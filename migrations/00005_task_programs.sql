-- +goose Up
-- What a task runs (its command or code, cut at 16 KiB), whether it is a background process
-- (it gives its session's lock up once started and is counted by its own quota), and the
-- process id of a started background process in its sandbox.
ALTER TABLE tasks ADD COLUMN program text NOT NULL DEFAULT '';
ALTER TABLE tasks ADD COLUMN background boolean NOT NULL DEFAULT false;
ALTER TABLE tasks ADD COLUMN pid integer;
-- Whether the execution's standard input stays open (stdin_open, or a terminal).
ALTER TABLE tasks ADD COLUMN interactive boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE tasks DROP COLUMN interactive;
ALTER TABLE tasks DROP COLUMN pid;
ALTER TABLE tasks DROP COLUMN background;
ALTER TABLE tasks DROP COLUMN program;
