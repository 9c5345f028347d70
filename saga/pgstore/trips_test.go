package pgstore_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/pgstore"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// tripCounter counts what a pool sends PostgreSQL, as a pgx tracer: the
// statements and the round trips (a batch is one).
type tripCounter struct{ stmts, trips atomic.Int64 }

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.stmts.Add(1)
	c.trips.Add(1)
	return ctx
}
func (*tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.trips.Add(1)
	return ctx
}
func (c *tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.stmts.Add(1)
}
func (*tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// countedStore returns a Store on a database of its own whose pool, of
// one connection (its statement cache warms with the first step), counts
// what it sends PostgreSQL, and a broker on an embedded nats-server.
func countedStore(t *testing.T) (*tripCounter, *pgxpool.Pool, *pgstore.Store, *transport.Broker) {
	t.Helper()
	ctx := t.Context()
	count := new(tripCounter)
	pc, err := pgxpool.ParseConfig(pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 1
	pc.ConnConfig.Tracer = count
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.New(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	broker := natsBroker(t, testutil.StartServer(t, embedded.Options{}).ClientURL())
	return count, pool, store, broker
}

// stepper returns a dispatcher of def on queue and a function that
// hands it the next message of the queue, as a receive loop would, and
// returns its step's result.
func stepper(t *testing.T, broker *transport.Broker, store saga.Store, queue string, def saga.Saga) (*saga.Dispatcher, func() saga.StepResult) {
	t.Helper()
	ctx := t.Context()
	var last saga.StepResult // Handle runs the hook before it returns
	hooks := saga.Hooks{StepDone: func(_ context.Context, _ saga.StepInfo, res saga.StepResult) { last = res }}
	d, err := saga.NewDispatcher(broker, store, queue, saga.WithSagas(def), saga.WithHooks(hooks), saga.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Open(ctx); err != nil {
		t.Fatal(err)
	}
	q, err := broker.Queue(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	return d, func() saga.StepResult {
		t.Helper()
		var del *transport.Delivery
		testutil.Await(t, 10*time.Second, func() string {
			ds, err := q.Receive(ctx, 1)
			if err != nil {
				return err.Error()
			}
			if len(ds) == 0 {
				return "no message"
			}
			del = ds[0]
			return ""
		})
		d.Handle(ctx, del)
		return last
	}
}

// The two-step workflow of the peers benchmark (workload e): step one
// inserts an order in the step's transaction and sends the message of
// step two (or requests a timeout), step two confirms the order and
// completes the instance.
type (
	TripPlace   struct{ ID int }
	TripConfirm struct{ ID int }
	tripDue     struct{}
	tripData    struct{ ID int }
)

func (TripPlace) MessageName() string   { return "pgstore.test.TripPlace" }
func (TripConfirm) MessageName() string { return "pgstore.test.TripConfirm" }
func (tripDue) MessageName() string     { return "pgstore.test.TripDue" }

// TestStepRoundTrips counts the statements and round trips to PostgreSQL
// of each step of the two-step workflow. A step's BEGIN goes out with its
// load and a revision drawn for its write (one round trip), and the
// write of its record with its COMMIT (one round trip); a step that only
// requests timeouts writes its record once; one that sends writes it a
// second time, after sending, to clear its outbox (on its own here: that
// update rides another step's COMMIT only while the pool's connections
// are scarce, see TestUpdateRidesAStepsCommit):
//
//	step one, sends:    BEGIN+SELECT+nextval, INSERT (order), INSERT (record)+COMMIT, UPDATE (outbox cleared)
//	step one, timeout:  BEGIN+SELECT+nextval, INSERT (order), INSERT (record)+COMMIT
//	step two:           BEGIN+SELECT+nextval, UPDATE (order), UPDATE (record)+COMMIT
func TestStepRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		name               string
		viaTimeout         bool
		oneStmts, oneTrips int64
		twoStmts, twoTrips int64
	}{
		{name: "send", oneStmts: 7, oneTrips: 4, twoStmts: 6, twoTrips: 3},
		{name: "timeout", viaTimeout: true, oneStmts: 6, oneTrips: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			count, pool, store, broker := countedStore(t)
			if _, err := pool.Exec(ctx, "CREATE TABLE trip_orders (id int PRIMARY KEY, state text NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			const queue = "trips"
			def := saga.Define[tripData]("trip")
			saga.StartedBy(def, saga.By(func(m TripPlace) string { return strconv.Itoa(m.ID) }),
				func(ctx context.Context, c *saga.Context[tripData], m TripPlace) error {
					tx, err := stepTx(ctx)
					if err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, "INSERT INTO trip_orders (id, state) VALUES ($1, 'placed')", m.ID); err != nil {
						return err
					}
					c.Data.ID = m.ID
					if tc.viaTimeout {
						_, err := c.RequestTimeout(time.Hour, tripDue{})
						return err
					}
					return c.Send(queue, TripConfirm(m))
				})
			saga.Handles(def, saga.By(func(m TripConfirm) string { return strconv.Itoa(m.ID) }),
				func(ctx context.Context, c *saga.Context[tripData], m TripConfirm) error {
					tx, err := stepTx(ctx)
					if err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, "UPDATE trip_orders SET state = 'confirmed' WHERE id = $1", m.ID); err != nil {
						return err
					}
					c.MarkComplete()
					return nil
				})
			saga.OnTimeout(def, func(context.Context, *saga.Context[tripData], tripDue) error { return nil })
			d, handleNext := stepper(t, broker, store, queue, def)
			// next hands the next message of the queue to the dispatcher
			// and returns what its step sent PostgreSQL.
			next := func() (stmts, trips int64) {
				t.Helper()
				s0, t0 := count.stmts.Load(), count.trips.Load()
				if res := handleNext(); res.Outcome != saga.Handled {
					t.Fatalf("step: %s, %v", res.Outcome, res.Err)
				}
				return count.stmts.Load() - s0, count.trips.Load() - t0
			}
			// The first instance warms the connection's statement cache.
			for id := range 2 {
				if _, err := d.Send(ctx, TripPlace{ID: id}); err != nil {
					t.Fatal(err)
				}
				stmts, trips := next()
				if id == 1 && (stmts != tc.oneStmts || trips != tc.oneTrips) {
					t.Errorf("step one: %d statements in %d round trips, want %d in %d", stmts, trips, tc.oneStmts, tc.oneTrips)
				}
				if tc.viaTimeout {
					continue
				}
				stmts, trips = next()
				if id == 1 && (stmts != tc.twoStmts || trips != tc.twoTrips) {
					t.Errorf("step two: %d statements in %d round trips, want %d in %d", stmts, trips, tc.twoStmts, tc.twoTrips)
				}
			}
		})
	}
}

// TestTxEndsWithTheStep: the handler's transaction cannot be committed or
// rolled back by the handler, and once the step's transaction ended (its
// connection back in the pool) every statement on it fails with
// pgx.ErrTxClosed rather than run on a connection another step may hold.
func TestTxEndsWithTheStep(t *testing.T) {
	store := newStore(t)
	ctx, u, err := store.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Load(ctx, "trip.none"); !errors.Is(err, saga.ErrNotFound) {
		t.Fatalf("Load: %v, want ErrNotFound", err)
	}
	tx, ok := pgstore.Tx(ctx)
	if !ok {
		t.Fatal("Tx: none in the step")
	}
	if err := tx.Commit(ctx); err == nil {
		t.Error("the handler committed the step's transaction")
	}
	if err := tx.Rollback(ctx); err == nil {
		t.Error("the handler rolled back the step's transaction")
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("Exec in the step: %v", err)
	}
	// The record's write goes out with the COMMIT, on the connection.
	if _, err := store.Put(ctx, "trip.none", []byte("{}"), 0); err != nil {
		t.Fatal(err)
	}
	if err := u.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); !errors.Is(err, pgx.ErrTxClosed) {
		t.Errorf("Exec after the step: %v, want pgx.ErrTxClosed", err)
	}
	if err := tx.QueryRow(ctx, "SELECT 1").Scan(new(int)); !errors.Is(err, pgx.ErrTxClosed) {
		t.Errorf("QueryRow after the step: %v, want pgx.ErrTxClosed", err)
	}
	if _, ok := pgstore.Tx(ctx); ok {
		t.Error("Tx after the step: ok")
	}
}
