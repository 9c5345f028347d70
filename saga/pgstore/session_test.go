package pgstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/jetsaga/jetsaga/internal/pgtest"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/pgstore"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// The session's saga: an account that books ledger rows. Each step writes
// the service's own rows in the step's transaction (pgstore.Tx): opening
// inserts the account, each booking inserts a ledger row and adds one to
// the account's count, closing marks it closed. The saga's data counts
// the bookings too, so that the business rows and the saga's state can be
// compared.
type (
	AcctOpen struct{ ID string }
	AcctBook struct {
		ID string
		N  int
	}
	acctDue  struct{}
	acctData struct{ Booked int }
)

func (AcctOpen) MessageName() string { return "pgstore.test.AcctOpen" }
func (AcctBook) MessageName() string { return "pgstore.test.AcctBook" }
func (acctDue) MessageName() string  { return "pgstore.test.AcctDue" }

// bank is the account saga on a pair of business tables.
type bank struct {
	accounts, ledger string // the business tables
	queue            string // the dispatcher's
	// chain: opening sends booking 1 to the queue and each booking the
	// next, up to steps; due: opening requests a timeout this far ahead,
	// which closes the account once steps are booked (and asks again
	// otherwise). Without them the account is fed from outside.
	chain bool
	steps int
	due   time.Duration
	// notify, if set: opening sends a message to this queue (which no
	// one reads).
	notify string
	// fault, if set, is called in each step's transaction after the
	// step's business writes, and may fail, panic or kill the process.
	fault func(ctx context.Context, what, id string, n int) error
}

// newBank creates the business tables in the shared database.
func newBank(t testing.TB, pool *pgxpool.Pool) *bank {
	t.Helper()
	p := newTable()
	b := &bank{accounts: p + "_accounts", ledger: p + "_ledger", queue: p + "q"}
	b.create(t, pool)
	return b
}

func (b *bank) create(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(t.Context(), "CREATE TABLE IF NOT EXISTS "+b.accounts+" (id text PRIMARY KEY, booked int NOT NULL, status text NOT NULL);"+
		"CREATE TABLE IF NOT EXISTS "+b.ledger+" (id text NOT NULL, n int NOT NULL)") // no key: a row written twice shows
	if err != nil {
		t.Fatal(err)
	}
}

// prefix is what the bank's names are made of.
func (b *bank) prefix() string { return strings.TrimSuffix(b.accounts, "_accounts") }

func (b *bank) check(ctx context.Context, what, id string, n int) error {
	if b.fault == nil {
		return nil
	}
	return b.fault(ctx, what, id, n)
}

func stepTx(ctx context.Context) (pgx.Tx, error) {
	tx, ok := pgstore.Tx(ctx)
	if !ok {
		return nil, saga.Permanent(errors.New("no step transaction"))
	}
	return tx, nil
}

func (b *bank) saga() saga.Saga {
	d := saga.Define[acctData]("acct")
	saga.StartedBy(d, saga.By(func(m AcctOpen) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[acctData], m AcctOpen) error {
			tx, err := stepTx(ctx)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+b.accounts+" (id, booked, status) VALUES ($1, 0, 'open')", m.ID); err != nil {
				return err
			}
			if err := b.check(ctx, "open", m.ID, 0); err != nil {
				return err
			}
			if b.due > 0 {
				if _, err := c.RequestTimeout(b.due, acctDue{}); err != nil {
					return err
				}
			}
			if b.notify != "" {
				if err := c.Send(b.notify, AcctBook{ID: m.ID}); err != nil {
					return err
				}
			}
			if b.chain {
				return c.Send(b.queue, AcctBook{ID: m.ID, N: 1})
			}
			return nil
		})
	saga.Handles(d, saga.By(func(m AcctBook) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[acctData], m AcctBook) error {
			tx, err := stepTx(ctx)
			if err != nil {
				return err
			}
			c.Data.Booked++
			if _, err := tx.Exec(ctx, "INSERT INTO "+b.ledger+" (id, n) VALUES ($1, $2)", m.ID, m.N); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "UPDATE "+b.accounts+" SET booked = booked + 1 WHERE id = $1", m.ID); err != nil {
				return err
			}
			if err := b.check(ctx, "book", m.ID, m.N); err != nil {
				return err
			}
			if b.chain && m.N < b.steps {
				return c.Send(b.queue, AcctBook{ID: m.ID, N: m.N + 1})
			}
			return nil
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[acctData], _ acctDue) error {
		if c.Data.Booked < b.steps {
			_, err := c.RequestTimeout(b.due, acctDue{})
			return err
		}
		tx, err := stepTx(ctx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "UPDATE "+b.accounts+" SET status = 'closed' WHERE id = $1", c.ID()); err != nil {
			return err
		}
		if err := b.check(ctx, "close", c.ID(), 0); err != nil {
			return err
		}
		c.MarkComplete()
		return nil
	})
	return d
}

// account is an account's business rows: its booked count and status,
// and how many ledger rows each booking number has.
type account struct {
	booked int
	status string
	ledger map[int]int
}

func (b *bank) account(t testing.TB, pool *pgxpool.Pool, id string) account {
	t.Helper()
	ctx := t.Context()
	a := account{ledger: map[int]int{}}
	err := pool.QueryRow(ctx, "SELECT booked, status FROM "+b.accounts+" WHERE id = $1", id).Scan(&a.booked, &a.status)
	if errors.Is(err, pgx.ErrNoRows) {
		a.status = "none"
	} else if err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, "SELECT n, count(*) FROM "+b.ledger+" WHERE id = $1 GROUP BY n", id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var n, c int
		if err := rows.Scan(&n, &c); err != nil {
			t.Fatal(err)
		}
		a.ledger[n] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return a
}

// booked returns the saga's count of bookings, -1 if the instance is
// not found, -2 once it completed.
func booked(t testing.TB, d *saga.Dispatcher, id string) int {
	t.Helper()
	inst, err := d.Instance(t.Context(), "acct", id)
	if errors.Is(err, saga.ErrNotFound) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	if inst.Completed {
		return -2
	}
	var data acctData
	if err := json.Unmarshal(inst.Data, &data); err != nil {
		t.Fatal(err)
	}
	return data.Booked
}

// natsBroker connects to a nats-server at url.
func natsBroker(t testing.TB, url string) *transport.Broker {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	broker, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	return broker
}

// runDispatcher runs a dispatcher of b's saga on store until the test
// ends.
func runDispatcher(t testing.TB, broker *transport.Broker, store saga.Store, b *bank, opts ...saga.Option) *saga.Dispatcher {
	t.Helper()
	opts = append([]saga.Option{saga.WithSagas(b.saga()), saga.WithLogger(testutil.Logger())}, opts...)
	d, err := saga.NewDispatcher(broker, store, b.queue, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, d.Run)
	return d
}

// TestSessionRollsBackBusinessWrites fails each booking's first run after
// its business writes, three ways, and checks that the writes of the
// failed run are gone: the ledger has the booking once, the account's
// count and the saga's agree. A forced conflict (another writer commits
// the record while the handler runs) is optimistic mode's only: with
// locking, that writer would wait for the step.
func TestSessionRollsBackBusinessWrites(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []pgstore.Option
	}{{"optimistic", nil}, {"locking", []pgstore.Option{pgstore.WithLocking()}}} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := t.Context()
			pool := sharedPool(t)
			store := newStore(t, mode.opts...)
			b := newBank(t, pool)
			faults := []string{"error", "panic"}
			if mode.opts == nil {
				faults = append(faults, "conflict")
			}
			var mu sync.Mutex
			failed := map[string]bool{}
			b.fault = func(hctx context.Context, what, id string, n int) error {
				if what != "book" {
					return nil
				}
				mu.Lock()
				again := failed[id]
				failed[id] = true
				mu.Unlock()
				if again {
					return nil
				}
				switch id {
				case "error":
					return errors.New("a transient failure after the business writes")
				case "panic":
					panic("a panic after the business writes")
				case "conflict":
					// Another writer commits the record meanwhile: the
					// step's commit conflicts.
					key := "acct.Y29uZmxpY3Q" // the dispatcher's key of "conflict"
					v, rev, err := store.Load(ctx, key)
					if err != nil {
						return err
					}
					if _, err := store.Put(ctx, key, v, rev); err != nil {
						return err
					}
				}
				return nil
			}
			srv := testutil.StartServer(t, embedded.Options{})
			broker := natsBroker(t, srv.ClientURL())
			d := runDispatcher(t, broker, store, b)
			for _, id := range faults {
				if _, err := d.Send(ctx, AcctOpen{ID: id}); err != nil {
					t.Fatal(err)
				}
			}
			testutil.Await(t, 20*time.Second, func() string {
				for _, id := range faults {
					if n := booked(t, d, id); n != 0 {
						return fmt.Sprintf("%s: booked %d, want an open account", id, n)
					}
				}
				return ""
			})
			for _, id := range faults {
				if _, err := d.Send(ctx, AcctBook{ID: id, N: 1}); err != nil {
					t.Fatal(err)
				}
			}
			testutil.Await(t, 20*time.Second, func() string {
				for _, id := range faults {
					if n := booked(t, d, id); n != 1 {
						return fmt.Sprintf("%s: the saga booked %d, want 1", id, n)
					}
				}
				return ""
			})
			mu.Lock()
			defer mu.Unlock()
			for _, id := range faults {
				if !failed[id] {
					t.Errorf("%s: the fault was never injected", id)
				}
				a := b.account(t, pool, id)
				if a.booked != 1 || a.ledger[1] != 1 || len(a.ledger) != 1 {
					t.Errorf("%s: account booked %d, ledger %v; want 1 and booking 1 once", id, a.booked, a.ledger)
				}
			}
		})
	}
}

const (
	crashEnv  = "PGSTORE_CRASH_AT"  // where the child kills itself: "write", "carry" or "commit"
	natsEnv   = "PGSTORE_NATS_URL"  // the parent's nats-server
	dbEnv     = "PGSTORE_DB_URL"    // the parent's database
	tablesEnv = "PGSTORE_TABLES"    // the store's table, then the bank's prefix
	stepsEnv  = "PGSTORE_BANK_STEP" // the bank's steps (worker processes)
	rideEnv   = "PGSTORE_RIDE"      // set: updates outside steps wait up to this long to ride a commit
)

// TestSessionCrash kills a process with SIGKILL in the middle of a step
// and lets another dispatcher take the message over when it comes back:
// after the handler's business writes, before the step's commit (the
// writes must be gone, and the redelivery writes them once); as the
// step's transaction has committed, before its message is sent ("carry":
// the redelivery finds the step in the record's inbox, writes nothing,
// and sends the message the stored outbox holds); and after the message
// was sent, before the delivery is settled (the redelivery sends it
// again, which the queue deduplicates). The notified queue gets the
// step's message exactly once.
func TestSessionCrash(t *testing.T) {
	if at := os.Getenv(crashEnv); at != "" {
		crashChild(t, at)
		return
	}
	for _, at := range []string{"write", "carry", "commit"} {
		t.Run(at, func(t *testing.T) {
			ctx := t.Context()
			pool := sharedPool(t)
			store := newStore(t)
			b := newBank(t, pool)
			b.notify = b.queue + "-opened"
			srv := testutil.StartServer(t, embedded.Options{})
			broker := natsBroker(t, srv.ClientURL())
			// The queue, with a short lock so that the dead child's
			// message comes back soon.
			qc := transport.QueueConfig{Name: b.queue, LockDuration: time.Second}
			if _, err := broker.OpenQueue(ctx, qc); err != nil {
				t.Fatal(err)
			}
			if _, err := broker.OpenQueue(ctx, transport.QueueConfig{Name: b.notify}); err != nil {
				t.Fatal(err)
			}
			opts := []saga.Option{saga.WithQueueConfig(qc)}
			sender, err := saga.NewDispatcher(broker, store, b.queue, append(opts, saga.WithSagas(b.saga()))...)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sender.Send(ctx, AcctOpen{ID: "a1"}); err != nil {
				t.Fatal(err)
			}

			cmd := childCommand(t, "^TestSessionCrash$", crashEnv+"="+at, natsEnv+"="+srv.ClientURL(),
				tablesEnv+"="+store.Table()+","+b.prefix())
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the child was to kill itself (%v):\n%s", err, out)
			}
			switch a := b.account(t, pool, "a1"); at {
			case "write":
				if a.status != "none" {
					t.Fatalf("after a crash before the commit: account %+v, want none", a)
				}
			case "carry", "commit":
				if a.status != "open" {
					t.Fatalf("after a crash after the commit: account %+v, want open", a)
				}
			}

			runs := 0
			b.fault = func(context.Context, string, string, int) error { runs++; return nil }
			stepped := make(chan saga.Outcome, 10)
			hooks := saga.Hooks{StepDone: func(_ context.Context, _ saga.StepInfo, r saga.StepResult) { stepped <- r.Outcome }}
			runDispatcher(t, broker, store, b, append(opts, saga.WithHooks(hooks))...)
			var o saga.Outcome
			select {
			case o = <-stepped:
			case <-time.After(30 * time.Second):
				t.Fatal("the message did not come back")
			}
			want, wantRuns := saga.Handled, 1
			if at != "write" {
				want, wantRuns = saga.Duplicate, 0
			}
			if o != want || runs != wantRuns {
				t.Fatalf("the redelivery: %s with %d handler runs, want %s with %d", o, runs, want, wantRuns)
			}
			var n int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+b.accounts+" WHERE id = 'a1' AND status = 'open'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Fatalf("%d open accounts a1, want 1", n)
			}
			nq, err := broker.Queue(ctx, b.notify)
			if err != nil {
				t.Fatal(err)
			}
			sent := 0
			for _, err := range nq.Browse(ctx, 0) {
				if err != nil {
					t.Fatal(err)
				}
				sent++
			}
			if sent != 1 {
				t.Fatalf("the step's message reached %s %d times, want once", b.notify, sent)
			}
		})
	}
}

// crashAfterCommit is a store whose step transactions kill the process
// as soon as they committed.
type crashAfterCommit struct{ *pgstore.Store }

type crashUnit struct{ saga.Unit }

func (s crashAfterCommit) Begin(ctx context.Context) (context.Context, saga.Unit, error) {
	uctx, u, err := s.Store.Begin(ctx)
	return uctx, crashUnit{u}, err
}

func (u crashUnit) Commit(ctx context.Context) error {
	err := u.Unit.Commit(ctx)
	if err == nil {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	return err
}

// crashChild is the child of TestSessionCrash: it runs the dispatcher,
// and kills itself at the point at of the first step.
func crashChild(t *testing.T, at string) {
	store, b := childBank(t)
	b.notify = b.queue + "-opened"
	b.fault = func(context.Context, string, string, int) error {
		if at == "write" {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		return nil
	}
	// After the commit, before the settle: as the message opening sends
	// is sent, after the step's transaction committed.
	hooks := saga.Hooks{Sent: func(context.Context, string, *transport.Message) {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}}
	qc := transport.QueueConfig{Name: b.queue, LockDuration: time.Second}
	var st saga.Store = store
	if at == "carry" {
		st = crashAfterCommit{store}
	}
	runDispatcher(t, natsBroker(t, os.Getenv(natsEnv)), st, b, saga.WithQueueConfig(qc), saga.WithHooks(hooks))
	select {
	case <-t.Context().Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the step never reached the point to crash at")
	}
}

// childCommand runs this test binary again as the test run names, on
// this binary's PostgreSQL server and shared database, with env.
func childCommand(t *testing.T, run string, env ...string) *exec.Cmd {
	t.Helper()
	sharedPool(t)
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run="+run, "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), append(env, pgtest.EnvURL+"="+pg.URL(), dbEnv+"="+sharedURL)...)
	return cmd
}

// childBank is the store and the bank a child process was given.
func childBank(t *testing.T) (*pgstore.Store, *bank) {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), os.Getenv(dbEnv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	table, prefix, _ := strings.Cut(os.Getenv(tablesEnv), ",")
	store, err := pgstore.New(t.Context(), pool, pgstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if s := os.Getenv(rideEnv); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		pgstore.SetRideWait(store, d)
	}
	b := &bank{accounts: prefix + "_accounts", ledger: prefix + "_ledger", queue: prefix + "q"}
	if s := os.Getenv(stepsEnv); s != "" {
		if b.steps, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	return store, b
}
