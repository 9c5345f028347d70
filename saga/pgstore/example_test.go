package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/pgstore"
)

// A store on the database DATABASE_URL names (in this package's tests, a
// private PostgreSQL server the tests start): migrate, open, and the
// conditional writes the dispatcher makes. A dispatcher takes the store
// as any other: saga.NewDispatcher(broker, store, "orders", ...).
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pgstore.Migrate(ctx, pool); err != nil { // or apply pgstore.Migration with your tool
		log.Fatal(err)
	}
	store, err := pgstore.New(ctx, pool)
	if err != nil {
		log.Fatal(err) // pgstore.ErrNeedsMigration if the table is missing or old
	}

	rev, err := store.Put(ctx, "order.bzE", []byte(`{"step":1}`), 0) // create
	if err != nil {
		log.Fatal(err)
	}
	_, err = store.Put(ctx, "order.bzE", []byte(`{"step":1}`), 0) // create again
	fmt.Println("second create:", errors.Is(err, saga.ErrConflict))
	rev2, err := store.Put(ctx, "order.bzE", []byte(`{"step":2}`), rev) // update at rev
	if err != nil {
		log.Fatal(err)
	}
	_, err = store.Put(ctx, "order.bzE", []byte(`{"step":3}`), rev) // stale
	fmt.Println("stale update:", errors.Is(err, saga.ErrConflict))
	v, r, err := store.Load(ctx, "order.bzE")
	fmt.Println(string(v), r == rev2, r > rev, err)
	// Output:
	// second create: true
	// stale update: true
	// {"step":2} true true <nil>
}
