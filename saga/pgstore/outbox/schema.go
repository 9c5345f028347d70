package outbox

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaVersion is the version of the table's schema that this code
// works on: New refuses a table migrated to an older one (or not at all).
const SchemaVersion = 1

// Migration is the migration to SchemaVersion, for the default table
// (DefaultTable), as Migrate applies it: for those who apply migrations
// with a tool of their own (MigrationSQL gives it for another table). It
// is idempotent; apply it in one transaction.
//
//go:embed schema.sql
var Migration string

// nameRef finds the table's name and the names derived from it in
// Migration.
var nameRef = regexp.MustCompile(`\bjetsaga_outbox(_schema|_pending)?\b`)

// names are the quoted, possibly schema-qualified names of a table and
// of what is kept beside it.
type names struct {
	table, schema string
	channel       string // of the notifications, unquoted: the table's name as given
	lockKey       string // of the advisory lock that serializes migrations
}

func quote(id string) string { return `"` + id + `"` } // id matches tablePattern: no quote inside

func nameOf(table string) names {
	schema, base, ok := strings.Cut(table, ".")
	if !ok {
		schema, base = "", table
	}
	q := func(suffix string) string {
		if schema == "" {
			return quote(base + suffix)
		}
		return quote(schema) + "." + quote(base+suffix)
	}
	return names{table: q(""), schema: q("_schema"), channel: table, lockKey: "jetsaga/outbox:" + table}
}

// MigrationSQL returns Migration for the table WithTable names (the
// default table without options).
func MigrationSQL(opts ...Option) (string, error) {
	c, err := newConfig(opts)
	if err != nil {
		return "", err
	}
	return migrationFor(c.table), nil
}

func migrationFor(table string) string {
	if table == DefaultTable {
		return Migration
	}
	_, base, ok := strings.Cut(table, ".")
	if !ok {
		base = table
	}
	n := nameOf(table)
	return nameRef.ReplaceAllStringFunc(Migration, func(ref string) string {
		switch strings.TrimPrefix(ref, "jetsaga_outbox") {
		case "_schema":
			return n.schema
		case "_pending":
			return quote(base + "_pending") // an index is named without its schema
		}
		return n.table
	})
}

// Migrate creates or upgrades the outbox table (WithTable; DefaultTable
// otherwise) and what it needs, in one transaction, under an advisory
// lock so that services starting together migrate one at a time. It is
// idempotent, and leaves a table migrated by a newer version as it is.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	c, err := newConfig(opts)
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", nameOf(c.table).lockKey); err != nil {
			return err
		}
		// Simple protocol: the migration is several statements.
		_, err := tx.Exec(ctx, migrationFor(c.table), pgx.QueryExecModeSimpleProtocol)
		return err
	})
	if err != nil {
		return fmt.Errorf("outbox: migrating table %s: %w", c.table, err)
	}
	return nil
}

// checkSchema reports ErrNeedsMigration or ErrSchemaTooNew unless the
// table's schema is one this code works on.
func checkSchema(ctx context.Context, pool *pgxpool.Pool, table string) error {
	var version, readableBy int
	err := pool.QueryRow(ctx, "SELECT version, readable_by FROM "+nameOf(table).schema).Scan(&version, &readableBy)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
		return fmt.Errorf("%w: table %s: no schema version (%s)", ErrNeedsMigration, table, pgErr.Message)
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: table %s: no schema version", ErrNeedsMigration, table)
	case err != nil:
		return fmt.Errorf("outbox: reading the schema version of table %s: %w", table, err)
	case version < SchemaVersion:
		return fmt.Errorf("%w: table %s has schema version %d, this code needs %d", ErrNeedsMigration, table, version, SchemaVersion)
	case readableBy > SchemaVersion:
		return fmt.Errorf("%w: table %s has schema version %d, which needs code of version %d or later; this code is %d", ErrSchemaTooNew, table, version, readableBy, SchemaVersion)
	}
	return nil
}
