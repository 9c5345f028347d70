package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/saga/pgstore/outbox"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// A message written in the transaction that writes the caller's own row,
// and relayed once the transaction commits; the one of a transaction
// that rolls back never is. (Here a relay pass by hand; a service runs
// Table.Run, or gives the table to saga.WithService.)
func Example() {
	ctx := context.Background()
	srv, err := embedded.Start(embedded.Options{}) // a nats-server for the example
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	broker, err := transport.NewJetStream(nc)
	if err != nil {
		log.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := outbox.Migrate(ctx, pool, outbox.WithTable("example_outbox")); err != nil {
		log.Fatal(err)
	}
	ob, err := outbox.New(ctx, pool, broker, outbox.WithTable("example_outbox"))
	if err != nil {
		log.Fatal(err) // outbox.ErrNeedsMigration if the table is missing or old
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE invoices (id text PRIMARY KEY)"); err != nil {
		log.Fatal(err)
	}
	for _, id := range []string{"inv-1", "inv-2"} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO invoices (id) VALUES ($1)", id); err != nil {
				return err
			}
			if _, err := ob.Send(ctx, tx, "invoices", &transport.Message{Body: []byte(id), MessageID: id}); err != nil {
				return err
			}
			if id == "inv-2" {
				return errors.New("rolled back")
			}
			return nil
		})
		fmt.Println(id, err)
	}
	n, err := ob.Relay(ctx)
	fmt.Println("relayed:", n, err)
	q, err := broker.Queue(ctx, "invoices")
	if err != nil {
		log.Fatal(err)
	}
	ds, err := q.Receive(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range ds {
		fmt.Println("received:", d.MessageID, string(d.Body))
	}
	// Output:
	// inv-1 <nil>
	// inv-2 rolled back
	// relayed: 1 <nil>
	// received: inv-1 inv-1
}
