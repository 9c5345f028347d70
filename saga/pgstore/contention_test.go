package pgstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/pgstore"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// modes are the store's two ways of running a step on an instance that
// other steps want at the same time.
var modes = []struct {
	name string
	opts []pgstore.Option
}{{"optimistic", nil}, {"locking", []pgstore.Option{pgstore.WithLocking()}}}

// TestContention: 3 dispatchers, each with a pool and a connection to
// NATS of its own, book 100 times on each of 20 hot accounts, all at
// once, in both modes: no booking is lost or made twice, in the saga's
// state or in the business rows. With locking, a step waits for the
// instance rather than conflicting: none conflicts.
func TestContention(t *testing.T) {
	const dispatchers, accounts, bookings = 3, 20, 100
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			ctx := t.Context()
			store := newStore(t, mode.opts...)
			pool := sharedPool(t)
			b := newBank(t, pool)
			srv := testutil.StartServer(t, embedded.Options{})
			var conflicts atomic.Int64
			hooks := saga.Hooks{StepDone: func(_ context.Context, _ saga.StepInfo, r saga.StepResult) { conflicts.Add(int64(r.Conflicts)) }}
			var ds []*saga.Dispatcher
			for range dispatchers {
				s := storeOnPool(t, 8, store.Table(), mode.opts...)
				ds = append(ds, runDispatcher(t, natsBroker(t, srv.ClientURL()), s, b,
					saga.WithConflictRetries(1000), saga.WithHooks(hooks)))
			}
			ids := make([]string, accounts)
			for i := range ids {
				ids[i] = fmt.Sprintf("hot-%02d", i)
				if _, err := ds[0].Send(ctx, AcctOpen{ID: ids[i]}); err != nil {
					t.Fatal(err)
				}
			}
			testutil.Await(t, 30*time.Second, func() string {
				for _, id := range ids {
					if n := booked(t, ds[0], id); n != 0 {
						return fmt.Sprintf("%s: booked %d, want an open account", id, n)
					}
				}
				return ""
			})
			began := time.Now()
			for n := 1; n <= bookings; n++ {
				for _, id := range ids {
					if _, err := ds[n%dispatchers].Send(ctx, AcctBook{ID: id, N: n}); err != nil {
						t.Fatal(err)
					}
				}
			}
			testutil.Await(t, 2*time.Minute, func() string {
				for _, id := range ids {
					if n := booked(t, ds[0], id); n != bookings {
						return fmt.Sprintf("%s: booked %d of %d", id, n, bookings)
					}
				}
				return ""
			})
			took := time.Since(began)
			for _, id := range ids {
				a := b.account(t, pool, id)
				if a.booked != bookings || len(a.ledger) != bookings {
					t.Errorf("%s: account booked %d, %d distinct ledger rows; want %d", id, a.booked, len(a.ledger), bookings)
				}
				for n, c := range a.ledger {
					if c != 1 || n < 1 || n > bookings {
						t.Errorf("%s: booking %d in the ledger %d times", id, n, c)
					}
				}
			}
			t.Logf("%s: %d bookings in %v (%.0f/s), %d conflicts", mode.name, accounts*bookings, took.Round(time.Millisecond),
				float64(accounts*bookings)/took.Seconds(), conflicts.Load())
			if mode.opts != nil && conflicts.Load() != 0 {
				t.Errorf("locking: %d conflicts, want none", conflicts.Load())
			}
		})
	}
}

// storeOnPool returns a Store on a pool of its own (at most conns
// connections) on the shared database's table.
func storeOnPool(t testing.TB, conns int32, table string, opts ...pgstore.Option) *pgstore.Store {
	t.Helper()
	sharedPool(t)
	cfg, err := pgxpool.ParseConfig(sharedURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := pgstore.New(t.Context(), pool, append([]pgstore.Option{pgstore.WithTable(table)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
