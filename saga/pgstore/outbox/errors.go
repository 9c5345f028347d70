package outbox

import "errors"

var (
	// ErrInvalidOption is returned by New, Migrate and MigrationSQL for an
	// invalid option.
	ErrInvalidOption = errors.New("outbox: invalid option")

	// ErrNeedsMigration is returned by New when the table's schema is
	// missing or older than this code's (SchemaVersion): apply the
	// migration (Migrate, or MigrationSQL with your own tool) first.
	ErrNeedsMigration = errors.New("outbox: the table's schema is missing or older than this code's: apply the migration (outbox.Migrate)")

	// ErrSchemaTooNew is returned by New when the table was migrated by a
	// newer version of this package that this code cannot work with:
	// upgrade the service.
	ErrSchemaTooNew = errors.New("outbox: the table's schema is newer than this code can use")

	// ErrInvalidMessage is returned by Send and Schedule for a message the
	// queue would refuse (a bad field, a size over the server's limit, a
	// bad queue name, a zero schedule time). It wraps the transport's
	// error (transport.ErrInvalidMessage, transport.ErrMessageTooLarge,
	// transport.ErrInvalidQueueName). Nothing is written.
	ErrInvalidMessage = errors.New("outbox: invalid message")

	// ErrNoTx is returned by Send, Schedule and SendSaga for a nil
	// transaction (or dispatcher): the message is written only in the
	// caller's transaction.
	ErrNoTx = errors.New("outbox: no transaction")
)
