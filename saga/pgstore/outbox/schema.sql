-- jetsaga saga/pgstore/outbox schema, version 1: the migration
-- outbox.Migrate applies, for those who apply migrations with a tool of
-- their own. It names the default table, jetsaga_outbox;
-- outbox.MigrationSQL returns it for another table name. Apply it in one
-- transaction. It is idempotent.

-- One row per message written by Send or Schedule and not yet relayed.
-- The relay publishes a row's message and deletes the row; a row whose
-- message the queue refuses for good gets dead_at and last_error, and
-- stays for an operator.
CREATE TABLE IF NOT EXISTS jetsaga_outbox (
	id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	queue          text NOT NULL,
	message_id     text NOT NULL,
	body           bytea NOT NULL,
	content_type   text NOT NULL,
	correlation_id text NOT NULL,
	session_id     text NOT NULL,
	reply_to       text NOT NULL,
	subject        text NOT NULL,
	properties     jsonb,                  -- object of string values, or NULL
	scheduled_at   timestamptz,            -- NULL: send at once
	created_at     timestamptz NOT NULL DEFAULT now(),
	attempts       integer NOT NULL DEFAULT 0, -- failed publishes
	last_error     text,
	dead_at        timestamptz             -- refused for good: the relay skips the row
);

-- The rows the relay takes, oldest first.
CREATE INDEX IF NOT EXISTS jetsaga_outbox_pending ON jetsaga_outbox (id) WHERE dead_at IS NULL;

-- One row: the schema's version, and the oldest version of the outbox's
-- code that can work on it. outbox.New refuses a table whose version is
-- older than its code's (or missing), or whose readable_by is newer.
CREATE TABLE IF NOT EXISTS jetsaga_outbox_schema (
	one         boolean PRIMARY KEY DEFAULT true CHECK (one),
	version     integer NOT NULL,
	readable_by integer NOT NULL
);
INSERT INTO jetsaga_outbox_schema AS s (version, readable_by) VALUES (1, 1)
	ON CONFLICT (one) DO UPDATE SET version = GREATEST(s.version, EXCLUDED.version),
		readable_by = GREATEST(s.readable_by, EXCLUDED.readable_by);
