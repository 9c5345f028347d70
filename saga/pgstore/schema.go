package pgstore

import (
	"context"
	_ "embed"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/saga/pgstore/internal/pgschema"
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
var nameRef = regexp.MustCompile(`\bjetsaga_sagas(_rev|_schema|_expires_at)?\b`)

// names are the quoted, possibly schema-qualified names of a table and
// of what the store keeps beside it.
type names struct {
	table, seq, schema string
	lockKey            string // of the advisory lock that serializes migrations
}

func nameOf(table string) names {
	q := func(suffix string) string { return pgschema.Qualified(table, suffix) }
	return names{table: q(""), seq: q("_rev"), schema: q("_schema"), lockKey: "jetsaga/pgstore:" + table}
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
		return Migration // the same as quoted
	}
	_, base, ok := strings.Cut(table, ".")
	if !ok {
		base = table
	}
	n := nameOf(table)
	return nameRef.ReplaceAllStringFunc(Migration, func(ref string) string {
		switch strings.TrimPrefix(ref, "jetsaga_sagas") {
		case "_rev":
			return n.seq
		case "_schema":
			return n.schema
		case "_expires_at":
			return pgschema.Quote(base + "_expires_at") // an index is named without its schema
		}
		return n.table
	})
}

// Migrate creates or upgrades the table (WithTable; DefaultTable
// otherwise) and what it needs, in one transaction, under an advisory
// lock so that services starting together migrate one at a time. It is
// idempotent, and leaves a table migrated by a newer version as it is.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	c, err := newConfig(opts)
	if err != nil {
		return err
	}
	if err := pgschema.Migrate(ctx, pool, nameOf(c.table).lockKey, migrationFor(c.table)); err != nil {
		return fmt.Errorf("pgstore: migrating table %s: %w", c.table, err)
	}
	return nil
}

// checkSchema reports ErrNeedsMigration or ErrSchemaTooNew unless the
// table's schema is one this code works on.
func checkSchema(ctx context.Context, pool *pgxpool.Pool, table string) error {
	return pgschema.Check(ctx, pool, nameOf(table).schema, table, SchemaVersion, ErrNeedsMigration, ErrSchemaTooNew, "pgstore")
}
