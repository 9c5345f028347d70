package outbox_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/jetsaga/jetsaga/internal/pgtest"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga/pgstore/outbox"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// pg is the test binary's PostgreSQL server (internal/pgtest); the
// environment variable DATABASE_URL names a database on it for the
// examples.
var pg *pgtest.Server

// Environment of a relay child process (TestRelayKill): the database
// URL, the NATS URL and the outbox table.
const (
	childPG    = "OUTBOX_TEST_CHILD_PG"
	childNATS  = "OUTBOX_TEST_CHILD_NATS"
	childTable = "OUTBOX_TEST_CHILD_TABLE"
)

func TestMain(m *testing.M) {
	if u := os.Getenv(childPG); u != "" {
		runChild(u, os.Getenv(childNATS), os.Getenv(childTable))
		return
	}
	srv, err := pgtest.Start(context.Background())
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: saga/pgstore/outbox's tests need PostgreSQL: %v\n", err)
		os.Exit(1)
	}
	pg = srv
	code := func() int {
		defer srv.Stop()
		u, err := srv.CreateDatabase(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, "FAIL:", err)
			return 1
		}
		os.Setenv("DATABASE_URL", u)
		return m.Run()
	}()
	os.Exit(code)
}

// runChild runs a relay until it is killed (or interrupted), reporting
// "ready" on stdout once its table is open. A failure to start exits 2.
func runChild(pgURL, natsURL, table string) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "relay child:", err)
		os.Exit(2)
	}
	pool, err := pgxpool.New(ctx, pgURL)
	if err != nil {
		fail(err)
	}
	nc, err := nats.Connect(natsURL, nats.MaxReconnects(-1))
	if err != nil {
		fail(err)
	}
	broker, err := transport.NewJetStream(nc)
	if err != nil {
		fail(err)
	}
	tbl, err := outbox.New(ctx, pool, broker, outbox.WithTable(table), outbox.WithBatchSize(20),
		outbox.WithPollInterval(time.Second), outbox.WithLogger(testutil.Logger()))
	if err != nil {
		fail(err)
	}
	fmt.Println("ready")
	_ = tbl.Run(ctx)
}

var tables atomic.Int64

// newTable names a table no other test uses.
func newTable() string { return "ob" + strconv.FormatInt(tables.Add(1), 10) }

// newPool returns a pool on a database of the test's own.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return poolOn(t, pg.NewDatabase(t))
}

// poolOn returns a pool on the database url names, closed when the test
// ends.
func poolOn(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newBroker starts an embedded nats-server for the test and returns a
// JetStream broker on it.
func newBroker(t testing.TB) (*transport.Broker, *embedded.Server) {
	t.Helper()
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
	return broker, srv
}

// newOutbox migrates a table of the test's own in pool's database and
// returns a Table on it.
func newOutbox(t testing.TB, pool *pgxpool.Pool, broker *transport.Broker, opts ...outbox.Option) *outbox.Table {
	t.Helper()
	opts = append([]outbox.Option{outbox.WithTable(newTable()), outbox.WithLogger(testutil.Logger())}, opts...)
	if err := outbox.Migrate(t.Context(), pool, opts...); err != nil {
		t.Fatal(err)
	}
	tbl, err := outbox.New(t.Context(), pool, broker, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}
