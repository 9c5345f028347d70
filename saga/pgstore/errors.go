package pgstore

import "errors"

var (
	// ErrInvalidOption is returned by New, Migrate and MigrationSQL for an
	// invalid option.
	ErrInvalidOption = errors.New("pgstore: invalid option")

	// ErrNeedsMigration is returned by New when the table's schema is
	// missing or older than this code's (SchemaVersion): apply the
	// migration (Migrate, or MigrationSQL with your own tool) first.
	ErrNeedsMigration = errors.New("pgstore: the table's schema is missing or older than this code's: apply the migration (pgstore.Migrate)")

	// ErrSchemaTooNew is returned by New when the table was migrated by a
	// newer version of pgstore that this code cannot work with: upgrade
	// the service.
	ErrSchemaTooNew = errors.New("pgstore: the table's schema is newer than this code can use")

	// ErrRecordTooLarge is returned (inside saga.Permanent: retrying cannot
	// make it smaller) by Put and PutTTL for a record larger than the
	// limit (WithMaxRecordSize). Nothing is written.
	ErrRecordTooLarge = errors.New("pgstore: record too large")
)
