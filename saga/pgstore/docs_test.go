package pgstore_test

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/pgstore"
	"github.com/jetsaga/jetsaga/transport"
)

// Order stands for the guide's saga (its handlers elided).
var Order = saga.Define[struct{}]("order")

// docsPostgres is the snippet of docs/postgres.md (internal/doccheck
// checks that the guide quotes it). Compiled here; TestDispatcherOnPgstore
// runs the same calls on a real server.
func docsPostgres(ctx context.Context, broker *transport.Broker) (*saga.Dispatcher, error) {
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/app")
	if err != nil {
		return nil, err
	}
	// Creates or upgrades the table; or apply pgstore.Migration with your own tool.
	if err := pgstore.Migrate(ctx, pool); err != nil {
		return nil, err
	}
	store, err := pgstore.New(ctx, pool) // WithTable("billing.sagas"), WithMaxRecordSize(...)
	if err != nil {
		return nil, err // pgstore.ErrNeedsMigration: the table is missing or older than the code
	}
	go store.Run(ctx) // removes expired rows every minute
	return saga.NewDispatcher(broker, store, "orders", saga.WithSagas(Order))
}

var _ = docsPostgres
