// Package pgschema is what pgstore and its outbox share about the tables
// they keep: quoted, schema-qualified names, a migration applied under an
// advisory lock, and the check of a table's schema version at start.
package pgschema

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Quote quotes an identifier that its package's table pattern admits (no
// quote inside).
func Quote(id string) string { return `"` + id + `"` }

// Qualified returns the quoted name of the table's base name plus suffix,
// in the table's schema if it names one ("billing.sagas", "_rev" →
// "billing"."sagas_rev").
func Qualified(table, suffix string) string {
	schema, base, ok := strings.Cut(table, ".")
	if !ok {
		return Quote(table + suffix)
	}
	return Quote(schema) + "." + Quote(base+suffix)
}

// Migrate applies sql (several statements) in one transaction, under the
// advisory lock lockKey, so that services starting together migrate one
// at a time.
func Migrate(ctx context.Context, pool *pgxpool.Pool, lockKey, sql string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", lockKey); err != nil {
			return err
		}
		// Simple protocol: the migration is several statements.
		_, err := tx.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
		return err
	})
}

// Check reads the one-row schema table (quoted) of table and reports
// needs unless it has at least version code, and tooNew if it needs code
// later than code; prefix names the package in other errors.
func Check(ctx context.Context, pool *pgxpool.Pool, schemaTable, table string, code int, needs, tooNew error, prefix string) error {
	var version, readableBy int
	err := pool.QueryRow(ctx, "SELECT version, readable_by FROM "+schemaTable).Scan(&version, &readableBy)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
		return fmt.Errorf("%w: table %s: no schema version (%s)", needs, table, pgErr.Message)
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: table %s: no schema version", needs, table)
	case err != nil:
		return fmt.Errorf("%s: reading the schema version of table %s: %w", prefix, table, err)
	case version < code:
		return fmt.Errorf("%w: table %s has schema version %d, this code needs %d", needs, table, version, code)
	case readableBy > code:
		return fmt.Errorf("%w: table %s has schema version %d, which needs code of version %d or later; this code is %d", tooNew, table, version, readableBy, code)
	}
	return nil
}
