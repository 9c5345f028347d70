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

type (
	signup         struct{ Email string }
	EmailConfirmed struct{ User string }
)

func (EmailConfirmed) MessageName() string { return "example.EmailConfirmed" }

// confirmEmail is a handler of a saga whose dispatcher's store is a
// pgstore.Store: it writes the service's own row in the step's
// transaction.
func confirmEmail(ctx context.Context, c *saga.Context[signup], m EmailConfirmed) error {
	tx, ok := pgstore.Tx(ctx)
	if !ok {
		return saga.Permanent(errors.New("signup: the dispatcher's store is not a pgstore.Store"))
	}
	// Commits with the saga's state, inbox and outbox, or not at all.
	if _, err := tx.Exec(ctx, "UPDATE users SET confirmed = true WHERE id = $1", m.User); err != nil {
		return err
	}
	c.MarkComplete()
	return nil
}

// A step's handler finds the step's transaction with Tx (confirmEmail,
// above, in a saga definition). Here a unit of work is opened by hand, as
// the dispatcher opens one around each step, and rolled back, as a
// failed step's is: the row written in it is gone.
func ExampleTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pgstore.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	store, err := pgstore.New(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS users (id text PRIMARY KEY, confirmed bool NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	def := saga.Define[signup]("signup")
	saga.Handles(def, saga.By(func(m EmailConfirmed) string { return m.User }), confirmEmail)

	_, ok := pgstore.Tx(ctx)
	fmt.Println("outside a step:", ok)
	stepCtx, unit, err := store.Begin(ctx) // what the dispatcher does
	if err != nil {
		log.Fatal(err)
	}
	tx, ok := pgstore.Tx(stepCtx)
	fmt.Println("in a step:", ok)
	if _, err := tx.Exec(stepCtx, "INSERT INTO users (id, confirmed) VALUES ('ann', false)"); err != nil {
		log.Fatal(err)
	}
	if err := unit.Rollback(ctx); err != nil { // the step failed
		log.Fatal(err)
	}
	_, ok = pgstore.Tx(stepCtx)
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM users").Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after the rollback:", ok, n)
	// Output:
	// outside a step: false
	// in a step: true
	// after the rollback: false 0
}
