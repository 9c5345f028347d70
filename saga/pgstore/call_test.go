package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/pgstore"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

type (
	Bill    struct{ Order string }
	charged struct{ Receipt string }
)

// saga.Call in steps that run in pgstore's units of work, with their rows
// locked (WithLocking) and a small pool: the call's intent is written
// outside the step's transaction — durable before the call, never waiting
// for the step's own lock — and a call whose answer is lost (the handler
// dies after the provider charged) is made again with its key by the
// retry: one charge per order.
func TestCallInUnits(t *testing.T) {
	ctx := t.Context()
	cfg, err := pgxpool.ParseConfig(pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pgstore.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.New(ctx, pool, pgstore.WithLocking())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	broker := natsBroker(t, testutil.StartServer(t, embedded.Options{}).ClientURL())

	var mu sync.Mutex
	charges := map[string]int{} // idempotency key → charges made (the provider keeps the first)
	calls := map[string]int{}
	lost := map[string]bool{} // orders whose first answer was lost
	def := saga.Define[charged]("bill")
	saga.StartedBy(def, saga.By(func(m Bill) string { return m.Order }),
		func(ctx context.Context, c *saga.Context[charged], m Bill) error {
			r, err := saga.Call(ctx, c, "charge", func(_ context.Context, key string) (string, error) {
				mu.Lock()
				defer mu.Unlock()
				calls[key]++
				if charges[key] == 0 {
					charges[key]++
				}
				if !lost[m.Order] {
					lost[m.Order] = true
					panic("the answer was lost")
				}
				return "receipt-" + key, nil
			})
			if err != nil {
				return err
			}
			c.Data.Receipt = r
			c.MarkComplete()
			return nil
		})
	d, err := saga.NewDispatcher(broker, store, "bills", saga.WithSagas(def), saga.WithLogger(testutil.Logger()),
		saga.WithRetry(saga.RetryPolicy{Immediate: 1, Delayed: 3, Backoff: func(int) time.Duration { return 50 * time.Millisecond }}),
		saga.WithConcurrency(8))
	if err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, d.Run)
	const orders = 30
	for i := range orders {
		if _, err := d.Send(ctx, Bill{Order: fmt.Sprintf("o%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Await(t, 60*time.Second, func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(lost) < orders {
			return fmt.Sprintf("%d of %d orders called", len(lost), orders)
		}
		for key, n := range calls {
			if n < 2 {
				return fmt.Sprintf("key %s called %d times; the retry has not called again yet", key, n)
			}
		}
		return ""
	})
	testutil.Await(t, 60*time.Second, func() string {
		for i := range orders {
			inst, err := d.Instance(ctx, "bill", fmt.Sprintf("o%02d", i))
			if err != nil || !inst.Completed {
				return fmt.Sprintf("o%02d not completed (%v)", i, err)
			}
		}
		return ""
	})
	mu.Lock()
	defer mu.Unlock()
	if len(charges) != orders {
		t.Errorf("%d keys charged for %d orders: the retry called with another key", len(charges), orders)
	}
	for key, n := range calls {
		if n != 2 {
			t.Errorf("key %s called %d times; want twice (the lost answer, the retry)", key, n)
		}
	}
}
