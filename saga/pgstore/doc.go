// Package pgstore keeps saga state in a PostgreSQL table: a
// saga.ExpiringStore and saga.ListingStore on github.com/jackc/pgx/v5. It
// is a module of its own (github.com/jetsaga/jetsaga/saga/pgstore), so
// that a service that does not use PostgreSQL does not depend on pgx.
//
// # Setting up
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db/app")
//	err = pgstore.Migrate(ctx, pool)      // or apply pgstore.Migration with your own tool
//	store, err := pgstore.New(ctx, pool)  // ErrNeedsMigration if the table is missing or old
//	go store.Run(ctx)                     // removes expired rows every minute
//	d, err := saga.NewDispatcher(broker, store, "orders", saga.WithSagas(Order))
//
// # The table
//
// One row per saga instance: key (the saga's name and its encoded
// instance ID), value (the record), rev, and expires_at. Migration is the
// schema, versioned by a one-row table beside it: New refuses a table whose
// schema is missing or older than SchemaVersion (ErrNeedsMigration), so a
// service that was deployed before its migration stops at start, not in
// the middle of a step. WithTable names another table, optionally in
// another schema.
//
// # Revisions
//
// Every write takes its revision from one sequence for the whole table
// (nextval), never from a per-row counter: a key's revisions only grow,
// also after the record was deleted, or expired, and created again. The
// dispatcher's record cache (saga.WithRecordCache) relies on this. Writes
// are conditional in one statement each: a create is an INSERT that
// finds no live row, an update or delete is an UPDATE or DELETE ... WHERE
// rev = $rev; anything else is saga.ErrConflict.
//
// # Expiry
//
// PutTTL sets expires_at (the server's clock, now() + ttl); a row past it
// is absent at once to Load, Put, Delete and ListKeys. Rows are removed
// lazily when their key is created again (the INSERT takes the expired
// row's place), and in batches by Cleanup, which Run calls every
// DefaultCleanupInterval (WithCleanupInterval). Without Run the tombstones
// of completed sagas stay, invisible, until their key is created again.
//
// # Limits
//
// Keys and values reach SQL only as parameters. A record larger than
// DefaultMaxRecordSize (1 MiB; WithMaxRecordSize) is ErrRecordTooLarge,
// inside saga.Permanent: the step fails for good rather than retrying.
//
// # The step's transaction
//
// Store is a saga.UnitStore: a dispatcher runs each step in a transaction
// of the store's pool (Begin), in which it loads the record, runs the
// handler and writes the record with its inbox and outbox. The handler
// gets that transaction from Tx(ctx) and writes the service's own rows in
// it: they commit with the saga's state or roll back with it (a handler
// error or panic, a conflict, a crash), and a redelivered message finds
// its inbox entry beside them and writes nothing twice. Messages and
// timeouts are carried out after the commit. The dispatcher's record
// cache is not used: each step loads in its transaction.
//
// WithLocking makes the step's load lock the row (SELECT ... FOR UPDATE),
// so that steps on a hot instance wait for each other instead of
// conflicting; optimistic revisions are the default.
//
// The handler must not commit or roll back the transaction, and holds a
// connection of the pool while it runs: with fewer connections than
// concurrent steps (saga.WithConcurrency), steps wait for one. That costs
// little when handlers are short — on 2 cores a pool of 4 under 8
// concurrent steps was as fast as a pool of 16 — so the pool need not be
// as large as the concurrency; it must have more connections than the
// handlers take on their own besides their step's (docs/postgres.md).
//
// The records of saga.Call (a call's intent, written before the call, and
// its outcome) are written outside the step's transaction, which holds
// its connection meanwhile: they go through a pool of the store's own,
// made from the given pool's configuration at the first call, of at most
// two connections, so that steps holding every connection of the given
// pool never wait for one more. Close closes it.
package pgstore
