// Package outbox is a transactional outbox on PostgreSQL for code that is
// not a saga handler: an HTTP or gRPC handler writes its own rows and the
// message that starts or feeds a saga in one transaction of its own, and
// the message reaches its queue if and only if that transaction commits.
//
//	tx, err := pool.Begin(ctx)
//	_, err = tx.Exec(ctx, "INSERT INTO users (email) VALUES ($1)", email)
//	_, err = ob.SendSaga(ctx, tx, dispatcher, SignedUp{Email: email})
//	err = tx.Commit(ctx)
//
// # The table
//
// Send, Schedule and SendSaga write a row in the caller's transaction
// (pgx.Tx): the queue's name and every field of the message — MessageID
// (a random one if the message has none), body, content type,
// correlation ID, session ID, reply-to, subject, properties and the
// scheduled time. Migrate creates the table (or apply Migration with your
// own tool); New refuses a table whose schema is missing or older than
// SchemaVersion (ErrNeedsMigration), at start. Messages are checked at
// Send as the broker would check them (ErrInvalidMessage), and reach SQL
// only as parameters.
//
// # The relay
//
// Table.Run publishes committed rows with their MessageID, then deletes
// them: in one transaction it claims a batch (FOR UPDATE SKIP LOCKED),
// publishes each row, deletes the published rows and commits. It wakes on
// a notification the writing transaction sends as it commits
// (LISTEN/NOTIFY), with a slow poll behind it. Run it on its own or
// inside saga.Dispatcher.Run (saga.WithService). Several relays may run
// on one table, in one process or many.
//
// # Guarantees
//
// A row of a transaction that rolls back is never published. A
// committed row is published at least once, and the queue stores it once:
// a relay that dies (or whose database restarts) after publishing and
// before its commit leaves the row, which is published again with the
// same MessageID, and the queue's duplicate detection drops the second
// copy — as long as it comes within the queue's DuplicateWindow
// (transport.QueueConfig; 10 minutes by default) of the first. A row left
// longer than that (no relay running for a window after such a crash) can
// reach the queue twice. A row the queue refuses for good is marked dead
// (dead_at, last_error) and skipped; see Run.
package outbox
