package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/internal/pgtest"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/pgstore"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

type Deposit struct {
	Account string
	N       int
}

type ledger struct {
	Applied map[int]bool
	Balance int
}

// PostgreSQL stopped (immediate, then fast), and the network to it
// black-holed (nothing refused, nothing answered), under a stream of
// deposits: the dispatcher waits for it instead of burning retries — with
// a policy that would dead-letter at the first delayed retry, nothing is
// dead-lettered — and every deposit is applied exactly once after it.
func TestPostgresOutageWaits(t *testing.T) {
	for _, mode := range []pgtest.Shutdown{pgtest.Immediate, pgtest.Fast} {
		t.Run(mode.String(), func(t *testing.T) {
			testPostgresOutage(t, pg.NewDatabase(t), func(ctx context.Context, whileDown func() error) error {
				return pg.RestartAfter(ctx, mode, whileDown)
			})
		})
	}
	t.Run("blackhole", func(t *testing.T) {
		u, err := url.Parse(pg.NewDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		hole := testutil.NewBlackhole(t, u.Host)
		u.Host = hole.Addr()
		// A step waits for an answer until its drain timeout: shorter
		// than the default's 30 s, so that the test sees the dispatcher
		// wait within seconds.
		testPostgresOutage(t, u.String(), func(_ context.Context, whileDown func() error) error {
			hole.Set(true)
			defer hole.Set(false)
			return whileDown()
		}, saga.WithDrainTimeout(2*time.Second))
	})
}

// testPostgresOutage runs deposits on the database at dbURL through
// outage, which calls whileDown while PostgreSQL cannot be reached.
func testPostgresOutage(t *testing.T, dbURL string, outage func(ctx context.Context, whileDown func() error) error, opts ...saga.Option) {
	ctx := t.Context()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// The restart breaks the shared pool's connections too.
	t.Cleanup(func() { sharedPool(t).Reset() })
	table := newTable()
	if err := pgstore.Migrate(ctx, pool, pgstore.WithTable(table)); err != nil {
		t.Fatal(err)
	}
	store, err := pgstore.New(ctx, pool, pgstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	broker := natsBroker(t, testutil.StartServer(t, embedded.Options{}).ClientURL())

	var mu sync.Mutex
	applied := map[string]int{} // "account/n" → commits seen by StepDone
	def := saga.Define[ledger]("account")
	saga.StartedBy(def, saga.By(func(m Deposit) string { return m.Account }),
		func(_ context.Context, c *saga.Context[ledger], m Deposit) error {
			if c.Data.Applied == nil {
				c.Data.Applied = map[int]bool{}
			}
			if !c.Data.Applied[m.N] {
				c.Data.Applied[m.N] = true
				c.Data.Balance += m.N
			}
			return nil
		})
	hooks := saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, res saga.StepResult) {
		if res.Outcome == saga.Handled {
			mu.Lock()
			applied[info.ID+"/"+info.MessageID]++
			mu.Unlock()
		}
	}}
	// No delayed retry: before outages were told apart, the first step
	// that met the stopped server went to the dead-letter queue.
	d, err := saga.NewDispatcher(broker, store, "deposits", append([]saga.Option{saga.WithSagas(def), saga.WithHooks(hooks),
		saga.WithLogger(testutil.Logger()), saga.WithRetry(saga.RetryPolicy{Immediate: 1, Delayed: -1}),
		saga.WithQueueConfig(transport.QueueConfig{Name: "deposits", LockDuration: 2 * time.Second})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Open(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, d.Run)

	const accounts, perAccount = 5, 20
	want := map[string]int{}
	send := func(from, to int) {
		for n := from; n < to; n++ {
			for a := range accounts {
				acct := fmt.Sprintf("a%d", a)
				if _, err := d.Send(ctx, Deposit{Account: acct, N: n + 1}, saga.WithMessageID(fmt.Sprintf("%s-%d", acct, n+1))); err != nil {
					t.Fatal(err)
				}
				want[acct] += n + 1
			}
		}
	}
	send(0, perAccount/2)
	err = outage(ctx, func() error {
		// Deposits keep coming while PostgreSQL is down.
		send(perAccount/2, perAccount)
		var h saga.Health
		deadline := time.Now().Add(60 * time.Second)
		for !time.Now().After(deadline) {
			if h = d.Health(); h.Waiting && h.Attempts >= 10 && time.Since(h.Since) > 3*time.Second {
				return nil
			}
			time.Sleep(50 * time.Millisecond) // polling the dispatcher's state: there is nothing to wait on
		}
		return fmt.Errorf("the dispatcher did not wait for PostgreSQL: %+v", h)
	})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Await(t, 60*time.Second, func() string {
		for a := range accounts {
			acct := fmt.Sprintf("a%d", a)
			inst, err := d.Instance(ctx, "account", acct)
			if err != nil {
				return fmt.Sprintf("%s: %v", acct, err)
			}
			var got ledger
			if err := json.Unmarshal(inst.Data, &got); err != nil {
				return err.Error()
			}
			if got.Balance != want[acct] || len(got.Applied) != perAccount {
				return fmt.Sprintf("%s: balance %d from %d deposits, want %d from %d", acct, got.Balance, len(got.Applied), want[acct], perAccount)
			}
		}
		return ""
	})
	q, err := broker.Queue(ctx, "deposits")
	if err != nil {
		t.Fatal(err)
	}
	for m, err := range q.DeadLetterQueue().Browse(ctx, 0) {
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("dead-lettered during the outage: %s %s: %s", m.MessageID, m.DeadLetterReason, m.DeadLetterDescription)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range applied {
		if n != 1 {
			t.Errorf("%s committed %d times", k, n)
		}
	}
	if h := d.Health(); h.Waiting {
		t.Errorf("still waiting after the restart: %+v", h)
	}
	if !errors.Is(saga.ErrUnavailable, transport.ErrUnavailable) {
		t.Error("saga.ErrUnavailable is not transport.ErrUnavailable")
	}
}
