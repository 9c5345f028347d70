package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/pgstore"
)

func TestNewRefusesAMissingOrOldSchema(t *testing.T) {
	pool := newPool(t)
	ctx := t.Context()
	_, err := pgstore.New(ctx, pool)
	if !errors.Is(err, pgstore.ErrNeedsMigration) {
		t.Fatalf("New on a database without the table: got %v, want ErrNeedsMigration", err)
	}
	// Migrate twice at once: the advisory lock lets one go first.
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := pgstore.Migrate(ctx, pool); err != nil {
				t.Errorf("Migrate: %v", err)
			}
		})
	}
	wg.Wait()
	if _, err := pgstore.New(ctx, pool); err != nil {
		t.Fatalf("New after Migrate: %v", err)
	}

	tests := []struct {
		name       string
		sql        string
		wantErr    error
		migrateFix bool // Migrate brings it back
	}{
		{"older", "UPDATE jetsaga_sagas_schema SET version = 0", pgstore.ErrNeedsMigration, true},
		{"no version row", "DELETE FROM jetsaga_sagas_schema", pgstore.ErrNeedsMigration, true},
		{"newer, readable", "UPDATE jetsaga_sagas_schema SET version = 7", nil, false},
		{"newer, needs newer code", "UPDATE jetsaga_sagas_schema SET version = 7, readable_by = 7", pgstore.ErrSchemaTooNew, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := pool.Exec(ctx, "INSERT INTO jetsaga_sagas_schema (version, readable_by) VALUES (1, 1) ON CONFLICT (one) DO UPDATE SET version = 1, readable_by = 1"); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, tc.sql); err != nil {
				t.Fatal(err)
			}
			_, err := pgstore.New(ctx, pool)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("New: got %v, want %v", err, tc.wantErr)
			}
			if !tc.migrateFix {
				return
			}
			if err := pgstore.Migrate(ctx, pool); err != nil {
				t.Fatal(err)
			}
			if _, err := pgstore.New(ctx, pool); err != nil {
				t.Fatalf("New after Migrate: %v", err)
			}
		})
	}
}

func TestMigrationByHand(t *testing.T) {
	pool := newPool(t)
	// What a user's migration tool does with the published SQL.
	for _, table := range []string{"", "by_hand"} {
		var opts []pgstore.Option
		if table != "" {
			opts = append(opts, pgstore.WithTable(table))
		}
		sql, err := pgstore.MigrationSQL(opts...)
		if err != nil {
			t.Fatal(err)
		}
		if table == "" && sql != pgstore.Migration {
			t.Fatalf("MigrationSQL() differs from Migration")
		}
		if _, err := pool.Exec(t.Context(), sql); err != nil {
			t.Fatalf("applying MigrationSQL(%q): %v", table, err)
		}
		s, err := pgstore.New(t.Context(), pool, opts...)
		if err != nil {
			t.Fatalf("New after the migration by hand: %v", err)
		}
		if _, err := s.Put(t.Context(), "k.v", []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTableNames(t *testing.T) {
	pool := newPool(t)
	ctx := t.Context()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA billing"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		table   string
		wantErr error
	}{
		{"sagas", nil},
		{"billing.sagas", nil},
		{"user", nil}, // a reserved word: the store quotes the names it writes
		{"_x9", nil},
		{strings.Repeat("a", 52), nil},
		{strings.Repeat("a", 53), pgstore.ErrInvalidOption},
		{"", pgstore.ErrInvalidOption},
		{"Sagas", pgstore.ErrInvalidOption},
		{"9sagas", pgstore.ErrInvalidOption},
		{"a.b.c", pgstore.ErrInvalidOption},
		{"sagas; DROP TABLE sagas", pgstore.ErrInvalidOption},
		{`sagas"`, pgstore.ErrInvalidOption},
		{"sagas--", pgstore.ErrInvalidOption},
		{"sa gas", pgstore.ErrInvalidOption},
		{"sagäs", pgstore.ErrInvalidOption},
		{".sagas", pgstore.ErrInvalidOption},
	}
	for _, tc := range tests {
		t.Run(tc.table, func(t *testing.T) {
			err := pgstore.Migrate(ctx, pool, pgstore.WithTable(tc.table))
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("Migrate: got %v, want %v", err, tc.wantErr)
			}
			s, err := pgstore.New(ctx, pool, pgstore.WithTable(tc.table))
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("New: got %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			rev, err := s.Put(ctx, "k.v", []byte(tc.table), 0)
			if err != nil {
				t.Fatal(err)
			}
			if v, r, err := s.Load(ctx, "k.v"); err != nil || string(v) != tc.table || r != rev {
				t.Fatalf("Load = %q, %d, %v; want %q, %d", v, r, err, tc.table, rev)
			}
		})
	}
	// The schema-qualified table is in its schema.
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM billing.sagas").Scan(&n); err != nil || n != 1 {
		t.Fatalf("billing.sagas has %d rows (%v), want 1", n, err)
	}
}

func TestRecordTooLarge(t *testing.T) {
	ctx := t.Context()
	s := newStore(t, pgstore.WithMaxRecordSize(1000))
	rev, err := s.Put(ctx, "big.a", make([]byte, 1000), 0)
	if err != nil {
		t.Fatalf("a record at the limit: %v", err)
	}
	for _, put := range []func() error{
		func() error { _, err := s.Put(ctx, "big.a", make([]byte, 1001), rev); return err },
		func() error { _, err := s.PutTTL(ctx, "big.b", make([]byte, 1001), 0, time.Hour); return err },
	} {
		err := put()
		if !errors.Is(err, pgstore.ErrRecordTooLarge) || !errors.Is(err, saga.ErrPermanent) {
			t.Fatalf("a record over the limit: got %v, want a permanent ErrRecordTooLarge", err)
		}
	}
	if v, r, err := s.Load(ctx, "big.a"); err != nil || len(v) != 1000 || r != rev {
		t.Fatalf("after a refused Put: Load = %d bytes at %d, %v; want the 1000 bytes at %d", len(v), r, err, rev)
	}
	// The default limit: 1 MiB.
	d := newStore(t)
	if _, err := d.Put(ctx, "big.c", make([]byte, pgstore.DefaultMaxRecordSize+1), 0); !errors.Is(err, pgstore.ErrRecordTooLarge) {
		t.Fatalf("a record over 1 MiB: got %v, want ErrRecordTooLarge", err)
	}
	if _, err := d.Put(ctx, "big.c", make([]byte, pgstore.DefaultMaxRecordSize), 0); err != nil {
		t.Fatalf("a record of 1 MiB: %v", err)
	}
	for _, n := range []int{0, -1, 512<<20 + 1} {
		if _, err := pgstore.New(ctx, sharedPool(t), pgstore.WithMaxRecordSize(n)); !errors.Is(err, pgstore.ErrInvalidOption) {
			t.Errorf("WithMaxRecordSize(%d): got %v, want ErrInvalidOption", n, err)
		}
	}
}

// Keys and values reach SQL only as parameters: hostile ones are stored
// as they are, and the table is still there.
func TestHostileKeysAndValues(t *testing.T) {
	ctx := t.Context()
	s := newStore(t)
	keys := []string{
		"x'); DROP TABLE " + s.Table() + "; --",
		`k"; DELETE FROM ` + s.Table() + `; --`,
		"k.$1", "k.%", "k._", `k.\`, "k. spaces ", "k.ünïcødé", "k.\t\n",
	}
	for _, k := range keys {
		v := []byte("value of " + k + "\x00\xff")
		rev, err := s.Put(ctx, k, v, 0)
		if err != nil {
			t.Fatalf("Put(%q): %v", k, err)
		}
		if got, r, err := s.Load(ctx, k); err != nil || !bytes.Equal(got, v) || r != rev {
			t.Fatalf("Load(%q) = %q, %d, %v", k, got, r, err)
		}
	}
	var listed []string
	for k, err := range s.ListKeys(ctx, "k.") {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, k)
	}
	if len(listed) != len(keys)-2 {
		t.Fatalf("ListKeys(k.) = %q: the LIKE wildcards %% and _ must not match more", listed)
	}
	// A key PostgreSQL's text cannot hold is an error, not a panic.
	if _, err := s.Put(ctx, "k.nul\x00", []byte("x"), 0); err == nil {
		t.Fatal("Put of a key with a NUL byte succeeded")
	}
}

func TestListKeys(t *testing.T) {
	ctx := t.Context()
	s := newStore(t)
	pgstore.SetListPage(s, 3) // several pages
	var want []string
	for i := range 10 {
		k := fmt.Sprintf("order.%02d", i)
		want = append(want, k)
		if _, err := s.Put(ctx, k, []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"orders.x", "orde.x", "invoice.01"} {
		if _, err := s.Put(ctx, k, []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
	}
	// An expired record is not listed.
	if _, err := s.PutTTL(ctx, "order.expired", []byte("x"), 0, time.Microsecond); err != nil {
		t.Fatal(err)
	}
	list := func(prefix string) []string {
		var got []string
		for k, err := range s.ListKeys(ctx, prefix) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, k)
		}
		return got
	}
	testutil.AwaitTrue(t, 5*time.Second, "order.expired to expire", func() bool {
		_, _, err := s.Load(ctx, "order.expired")
		return errors.Is(err, saga.ErrNotFound)
	})
	if got := list("order."); !slices.Equal(got, want) {
		t.Fatalf("ListKeys(order.) = %q, want %q", got, want)
	}
	if got := list(""); len(got) != 13 {
		t.Fatalf("ListKeys() = %q, want 13 keys", got)
	}
	// Stopping early stops the listing.
	n := 0
	for range s.ListKeys(ctx, "") {
		n++
		if n == 4 {
			break
		}
	}
	if n != 4 {
		t.Fatalf("iterated %d keys after a break at 4", n)
	}
	// A failed query is yielded as an error.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, err := range s.ListKeys(cancelled, "order.") {
		if err == nil {
			t.Fatal("ListKeys on a cancelled context yielded a key")
		}
	}
}

func TestCleanup(t *testing.T) {
	ctx := t.Context()
	pool := sharedPool(t)
	s := newStore(t, pgstore.WithCleanupInterval(20*time.Millisecond), pgstore.WithLogger(testutil.Logger()))
	rows := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+s.Table()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := s.Put(ctx, "kept.a", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := s.PutTTL(ctx, fmt.Sprintf("gone.%d", i), []byte("x"), 0, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.PutTTL(ctx, "later.a", []byte("x"), 0, time.Hour); err != nil {
		t.Fatal(err)
	}
	testutil.AwaitTrue(t, 5*time.Second, "the short-lived records to expire", func() bool {
		_, _, err := s.Load(ctx, "gone.4")
		return errors.Is(err, saga.ErrNotFound)
	})
	if n := rows(); n != 7 {
		t.Fatalf("%d rows before the cleanup, want 7 (expired rows stay until removed)", n)
	}
	// A create takes an expired row's place.
	if _, err := s.Put(ctx, "gone.0", []byte("again"), 0); err != nil {
		t.Fatal(err)
	}
	n, err := s.Cleanup(ctx)
	if err != nil || n != 4 {
		t.Fatalf("Cleanup = %d, %v; want 4 rows removed", n, err)
	}
	if n := rows(); n != 3 {
		t.Fatalf("%d rows after the cleanup, want 3", n)
	}
	// Run cleans up in the background.
	if _, err := s.PutTTL(ctx, "gone.5", []byte("x"), 0, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, s.Run)
	testutil.AwaitTrue(t, 5*time.Second, "Run to remove the expired row", func() bool { return rows() == 3 })
}

func TestPutTTLRefusesANonPositiveTTL(t *testing.T) {
	s := newStore(t)
	for _, ttl := range []time.Duration{0, -time.Second} {
		if _, err := s.PutTTL(t.Context(), "ttl.a", []byte("x"), 0, ttl); err == nil {
			t.Errorf("PutTTL with ttl %v succeeded", ttl)
		}
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := pgstore.New(t.Context(), nil); !errors.Is(err, pgstore.ErrInvalidOption) {
		t.Errorf("New(nil pool): got %v, want ErrInvalidOption", err)
	}
	if _, err := pgstore.New(t.Context(), sharedPool(t), pgstore.WithCleanupInterval(0)); !errors.Is(err, pgstore.ErrInvalidOption) {
		t.Errorf("WithCleanupInterval(0): got %v, want ErrInvalidOption", err)
	}
}
