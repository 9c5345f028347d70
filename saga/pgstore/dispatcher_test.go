package pgstore_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// The saga of the end-to-end test: an order reminds its customer twice,
// 100 ms apart, on timeouts, then completes and reports how many
// reminders it counted.
type (
	Ordered  struct{ ID string }
	Reminded struct {
		ID        string
		Reminders int
	}
	remind    struct{}
	orderData struct{ Reminders int }
)

func (Ordered) MessageName() string  { return "pgstore.test.Ordered" }
func (Reminded) MessageName() string { return "pgstore.test.Reminded" }
func (remind) MessageName() string   { return "pgstore.test.Remind" }

func orderSaga() saga.Saga {
	d := saga.Define[orderData]("order")
	saga.StartedBy(d, saga.By(func(m Ordered) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[orderData], _ Ordered) error {
			_, err := c.RequestTimeout(100*time.Millisecond, remind{})
			return err
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[orderData], _ remind) error {
		c.Data.Reminders++
		if c.Data.Reminders < 2 {
			_, err := c.RequestTimeout(100*time.Millisecond, remind{})
			return err
		}
		c.MarkComplete()
		return c.Send("reminded", Reminded{ID: c.ID(), Reminders: c.Data.Reminders})
	})
	return d
}

// TestDispatcherOnPgstore runs sagas with timeouts (with the step's
// transaction, and WithoutSession) on an embedded
// nats-server with their state in PostgreSQL, two dispatchers competing
// for the queue (and so for the instances: conflicts on the record's
// revision are retried on fresh state).
func TestDispatcherOnPgstore(t *testing.T) {
	t.Run("session", func(t *testing.T) { testDispatcherOnPgstore(t, false) })
	t.Run("without-session", func(t *testing.T) { testDispatcherOnPgstore(t, true) })
}

func testDispatcherOnPgstore(t *testing.T, withoutSession bool) {
	ctx := t.Context()
	store := newStore(t)
	var sagaStore saga.Store = store
	if withoutSession {
		sagaStore = store.WithoutSession()
	}
	srv := testutil.StartServer(t, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	broker, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	var first *saga.Dispatcher
	for range 2 {
		d, err := saga.NewDispatcher(broker, sagaStore, "orders", saga.WithSagas(orderSaga()), saga.WithLogger(testutil.Logger()))
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Open(ctx); err != nil {
			t.Fatal(err)
		}
		testutil.RunUntilCleanup(t, d.Run)
		first = d
	}
	const orders = 10
	for i := range orders {
		if _, err := first.Send(ctx, Ordered{ID: fmt.Sprintf("o%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	reminded, err := broker.Queue(ctx, "reminded")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	testutil.Await(t, 30*time.Second, func() string {
		ds, err := reminded.Receive(ctx, orders)
		if err != nil {
			return err.Error()
		}
		for _, d := range ds {
			r, err := saga.Decode[Reminded](d.Message)
			if err != nil {
				t.Fatal(err)
			}
			if _, dup := got[r.ID]; dup {
				t.Errorf("%s reported twice", r.ID)
			}
			got[r.ID] = r.Reminders
			if err := d.Complete(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if len(got) < orders {
			return fmt.Sprintf("%d of %d orders reported", len(got), orders)
		}
		return ""
	})
	for id, n := range got {
		if n != 2 {
			t.Errorf("%s counted %d reminders, want 2", id, n)
		}
	}
	// Each completed instance left its tombstone, a row that expires.
	var rows, expiring, revs int
	err = sharedPool(t).QueryRow(ctx, "SELECT count(*), count(expires_at), count(DISTINCT rev) FROM "+store.Table()).Scan(&rows, &expiring, &revs)
	if err != nil {
		t.Fatal(err)
	}
	if rows != orders || expiring != orders || revs != orders {
		t.Fatalf("table: %d rows, %d expiring, %d distinct revisions; want %d of each", rows, expiring, revs, orders)
	}
	for i := range orders {
		key := "order." + base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "o%d", i)) // the dispatcher's key
		if _, _, err := store.Load(ctx, key); err != nil {
			t.Errorf("the tombstone of o%d: %v", i, err)
		}
	}
	// The listing finds no stuck instance (and lists through ListKeys).
	for inst, err := range first.StuckInstances(ctx, "order") {
		t.Fatalf("StuckInstances: %+v, %v; want none", inst, err)
	}
}
