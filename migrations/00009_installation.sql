-- +goose Up
-- The installation this database belongs to: one row, written by the first gateway that
-- starts on it (store.Store.Installation), never by a migration — a database cloned from a
-- migrated template (the tests') must not share another's id. Providers label every
-- container, volume, image and pod they make with it, and sweep only their own.
CREATE TABLE installation (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    id         text NOT NULL CHECK (id <> ''),
    created_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE installation;
