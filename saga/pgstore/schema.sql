-- jetsaga saga/pgstore schema, version 1: the migration pgstore.Migrate
-- applies, for those who apply migrations with a tool of their own. It
-- names the default table, jetsaga_sagas; pgstore.MigrationSQL(table)
-- returns it for another table name. Apply it in one transaction. It is
-- idempotent.

-- Revisions of every record of the table come from this one sequence, so
-- that a key never gets a revision it had before, also after it was
-- deleted or expired and created again.
CREATE SEQUENCE IF NOT EXISTS jetsaga_sagas_rev AS bigint;

CREATE TABLE IF NOT EXISTS jetsaga_sagas (
	key        text COLLATE "C" PRIMARY KEY, -- saga name '.' encoded instance ID
	value      bytea NOT NULL,               -- the saga record, as the dispatcher encodes it
	rev        bigint NOT NULL,              -- from jetsaga_sagas_rev
	expires_at timestamptz                   -- NULL: kept for good; past it the row is absent
);

-- For the cleanup of expired rows.
CREATE INDEX IF NOT EXISTS jetsaga_sagas_expires_at ON jetsaga_sagas (expires_at) WHERE expires_at IS NOT NULL;

-- One row: the schema's version, and the oldest version of pgstore's code
-- that can work on it. pgstore.New refuses a table whose version is older
-- than its code's (or missing), or whose readable_by is newer.
CREATE TABLE IF NOT EXISTS jetsaga_sagas_schema (
	one         boolean PRIMARY KEY DEFAULT true CHECK (one),
	version     integer NOT NULL,
	readable_by integer NOT NULL
);
INSERT INTO jetsaga_sagas_schema AS s (version, readable_by) VALUES (1, 1)
	ON CONFLICT (one) DO UPDATE SET version = GREATEST(s.version, EXCLUDED.version),
		readable_by = GREATEST(s.readable_by, EXCLUDED.readable_by);
