package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/internal/pgtest"
	"github.com/jetsaga/jetsaga/saga/pgstore"
)

// pg is the test binary's PostgreSQL server (internal/pgtest); the
// environment variable DATABASE_URL names a database on it for the
// examples.
var pg *pgtest.Server

func TestMain(m *testing.M) {
	srv, err := pgtest.Start(context.Background())
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: saga/pgstore's tests need PostgreSQL: %v\n", err)
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

var (
	sharedOnce sync.Once
	shared     *pgxpool.Pool
	sharedURL  string
	sharedErr  error
	tables     atomic.Int64
)

// sharedPool is a pool on one database for the tests that each use a
// table of their own.
func sharedPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	sharedOnce.Do(func() {
		if sharedURL, sharedErr = pg.CreateDatabase(context.Background()); sharedErr == nil {
			shared, sharedErr = pgxpool.New(context.Background(), sharedURL)
		}
	})
	if sharedErr != nil {
		t.Fatalf("a database for the tests: %v", sharedErr)
	}
	return shared
}

// newPool returns a pool on a database of the test's own.
func newPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(t.Context(), pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newTable names a table no other test uses.
func newTable() string { return "t" + strconv.FormatInt(tables.Add(1), 10) }

// newStore migrates a table of the test's own in the shared database and
// returns a Store on it.
func newStore(t testing.TB, opts ...pgstore.Option) *pgstore.Store {
	t.Helper()
	pool := sharedPool(t)
	opts = append([]pgstore.Option{pgstore.WithTable(newTable())}, opts...)
	if err := pgstore.Migrate(t.Context(), pool, opts...); err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(t.Context(), pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
