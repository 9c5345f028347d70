package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/saga"
)

// Store is a saga.ExpiringStore and saga.ListingStore on a PostgreSQL
// table. It is safe for concurrent use.
type Store struct {
	pool      *pgxpool.Pool
	table     string
	names     names
	sql       statements
	maxRecord int
	logger    *slog.Logger
	every     time.Duration
	batch     int
	listPage  int
	locking   bool
	rides     rides
	calls     callPools // calls.go
}

var (
	_ saga.ExpiringStore = (*Store)(nil)
	_ saga.ListingStore  = (*Store)(nil)
)

// statements are the SQL statements of a Store, on its table. A row is
// live while its expires_at is NULL or in the future (of the server's
// clock): a row past it is absent to every statement.
type statements struct {
	load, lock, create, update, delete, list, cleanup string
	// In a step's transaction: a revision drawn with the load, and the
	// writes of the record at that revision, sent with the COMMIT (see
	// session). A write that matches no row (a conflict) divides by zero:
	// an error, which aborts the transaction, so that the COMMIT sent
	// behind it does not commit the handler's writes without the record.
	next, createAt, updateAt string
	// ride: an update that rides a step's COMMIT (see rides),
	// conditional on its revision as update is, of a row no other
	// transaction holds (SKIP LOCKED): no row comes back otherwise.
	ride string
}

const live = "(expires_at IS NULL OR expires_at > now())"

// oneRowOrFail returns the revision the write w wrote, or fails with
// division_by_zero (22012) if it wrote no row.
const oneRowOrFail = "SELECT coalesce((SELECT rev FROM w), 0) / (SELECT count(*) FROM w)"

func statementsFor(n names) statements {
	return statements{
		load: "SELECT value, rev FROM " + n.table + " WHERE key = $1 AND " + live,
		lock: "SELECT value, rev FROM " + n.table + " WHERE key = $1 AND " + live + " FOR UPDATE",
		// Create: insert, or take the place of an expired row (lazily
		// removed here). A live row makes no row come back: ErrConflict.
		create: "INSERT INTO " + n.table + " AS r (key, value, rev, expires_at) " +
			"VALUES ($1, $2, nextval('" + n.seq + "'), now() + $3::bigint * interval '1 microsecond') " +
			"ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, rev = EXCLUDED.rev, expires_at = EXCLUDED.expires_at " +
			"WHERE r.expires_at IS NOT NULL AND r.expires_at <= now() RETURNING rev",
		update: "UPDATE " + n.table + " SET value = $2, rev = nextval('" + n.seq + "'), " +
			"expires_at = now() + $3::bigint * interval '1 microsecond' " +
			"WHERE key = $1 AND rev = $4 AND " + live + " RETURNING rev",
		// The outer SELECT sees the table as before the DELETE: whether a
		// live row was there tells ErrConflict from ErrNotFound.
		delete: "WITH d AS (DELETE FROM " + n.table + " WHERE key = $1 AND rev = $2 AND " + live + " RETURNING 1) " +
			"SELECT EXISTS (SELECT 1 FROM d), EXISTS (SELECT 1 FROM " + n.table + " WHERE key = $1 AND " + live + ")",
		next: "SELECT nextval('" + n.seq + "') FROM generate_series(1, $1)",
		createAt: "WITH w AS (INSERT INTO " + n.table + " AS r (key, value, rev, expires_at) " +
			"VALUES ($1, $2, $4, now() + $3::bigint * interval '1 microsecond') " +
			"ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, rev = EXCLUDED.rev, expires_at = EXCLUDED.expires_at " +
			"WHERE r.expires_at IS NOT NULL AND r.expires_at <= now() RETURNING rev) " + oneRowOrFail,
		updateAt: "WITH w AS (UPDATE " + n.table + " SET value = $2, rev = $5, " +
			"expires_at = now() + $3::bigint * interval '1 microsecond' " +
			"WHERE key = $1 AND rev = $4 AND " + live + " RETURNING rev) " + oneRowOrFail,
		ride: "UPDATE " + n.table + " SET value = $2, rev = nextval('" + n.seq + "'), " +
			"expires_at = now() + $3::bigint * interval '1 microsecond' " +
			"WHERE key = (SELECT key FROM " + n.table + " WHERE key = $1 AND rev = $4 AND " + live + " FOR UPDATE SKIP LOCKED) " +
			"AND rev = $4 RETURNING rev",
		list: "SELECT key FROM " + n.table + " WHERE key > $1 AND key < $2 AND " + live + " ORDER BY key LIMIT $3",
		cleanup: "DELETE FROM " + n.table + " WHERE key IN (SELECT key FROM " + n.table +
			" WHERE expires_at <= now() LIMIT $1 FOR UPDATE SKIP LOCKED) AND expires_at <= now()",
	}
}

// New returns a Store on the table (WithTable; DefaultTable otherwise) in
// pool's database. The table must have been migrated to this code's
// SchemaVersion (Migrate, or Migration applied with your own tool):
// otherwise New returns ErrNeedsMigration (ErrSchemaTooNew for a table
// only newer code can use), so that a service finds out as it starts,
// not in the middle of a step.
func New(ctx context.Context, pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrInvalidOption)
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := checkSchema(ctx, pool, c.table); err != nil {
		return nil, err
	}
	// Updates ride steps' commits only under READ COMMITTED: under a
	// stricter isolation a rider's row, updated since the step's
	// snapshot was taken, would fail the step with a serialization error.
	var iso string
	if err := pool.QueryRow(ctx, "SHOW default_transaction_isolation").Scan(&iso); err != nil {
		return nil, fmt.Errorf("pgstore: reading the default transaction isolation: %w", err)
	}
	n := nameOf(c.table)
	return &Store{
		pool: pool, table: c.table, names: n, sql: statementsFor(n),
		maxRecord: c.maxRecord, logger: c.logger, every: c.cleanEvery, batch: c.cleanBatch, listPage: 1000,
		locking: c.locking, rides: rides{max: rideWait, busy: int(pool.Config().MaxConns), off: iso != "read committed"},
	}, nil
}

// Table returns the name of the store's table.
func (s *Store) Table() string { return s.table }

// Load returns the value and revision of key, or saga.ErrNotFound if
// there is no live row (none, or one past its expiry). In a step's
// transaction (see Begin) it reads in it, and with WithLocking locks the
// row until the transaction ends.
func (s *Store) Load(ctx context.Context, key string) ([]byte, uint64, error) {
	var value []byte
	var rev int64
	var err error
	if ss, ok := s.session(ctx); ok {
		stmt := s.sql.load
		if s.locking {
			stmt = s.sql.lock
		}
		err = ss.load(ctx, stmt, key, &value, &rev)
	} else {
		err = s.forCall(key).QueryRow(ctx, s.sql.load, key).Scan(&value, &rev)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, fmt.Errorf("%w: %s", saga.ErrNotFound, key)
	}
	if err != nil {
		return nil, 0, storeErr("load", key, err)
	}
	return value, uint64(rev), nil
}

// Put writes value if key's revision is rev (0: if there is no live
// row), with a new revision from the table's sequence, and keeps the
// record for good. Otherwise it returns saga.ErrConflict.
//
// An update (rev > 0) outside a step's transaction, made while steps'
// transactions hold every connection of the pool (or steps wait for
// one), may go out with one of their COMMITs, in the same transaction
// (see docs/postgres.md, "Clearing the outbox of a step that sent"); it
// returns once committed, as it does on its own.
func (s *Store) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	return s.put(ctx, key, value, rev, nil)
}

// PutTTL is Put, and the record expires ttl (positive, to the
// microsecond) after this write, by the server's clock: Load then
// returns saga.ErrNotFound and Put with rev 0 creates it again. The row
// itself is removed when it is created again, or by Cleanup (Run).
func (s *Store) PutTTL(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	if ttl <= 0 {
		return 0, fmt.Errorf("pgstore: put %s: ttl %v: must be positive", key, ttl)
	}
	micros := max(ttl.Microseconds(), 1)
	return s.put(ctx, key, value, rev, &micros)
}

func (s *Store) put(ctx context.Context, key string, value []byte, rev uint64, ttlMicros *int64) (uint64, error) {
	if len(value) > s.maxRecord {
		return 0, saga.Permanent(fmt.Errorf("%w: put %s: %d bytes, the limit is %d", ErrRecordTooLarge, key, len(value), s.maxRecord))
	}
	if value == nil {
		value = []byte{} // the column is NOT NULL; nil would be NULL
	}
	if rev > math.MaxInt64 {
		return 0, fmt.Errorf("%w: %s: revision %d was never issued", saga.ErrConflict, key, rev)
	}
	q := s.forCall(key)
	if ss, ok := s.session(ctx); ok {
		if n, deferred, err := ss.put(ctx, key, value, rev, ttlMicros); err != nil || deferred {
			return n, err
		}
		q = ss.tx
	} else if rev > 0 && q == querier(s.pool) {
		// An update outside a step: it may ride a step's COMMIT.
		if n, ok := s.rides.ride(ctx, &rider{key: key, value: value, ttl: ttlMicros, rev: int64(rev)}); ok {
			return uint64(n), nil
		}
	}
	var n int64
	var err error
	if rev == 0 {
		err = q.QueryRow(ctx, s.sql.create, key, value, ttlMicros).Scan(&n)
	} else {
		err = q.QueryRow(ctx, s.sql.update, key, value, ttlMicros, int64(rev)).Scan(&n)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		if rev == 0 {
			return 0, fmt.Errorf("%w: %s exists", saga.ErrConflict, key)
		}
		return 0, fmt.Errorf("%w: %s is not at revision %d", saga.ErrConflict, key, rev)
	}
	if err != nil {
		return 0, storeErr("put", key, err)
	}
	return uint64(n), nil
}

// Delete removes key's row if its revision is rev; otherwise
// saga.ErrConflict, or saga.ErrNotFound if there is no live row.
func (s *Store) Delete(ctx context.Context, key string, rev uint64) error {
	if rev > math.MaxInt64 {
		rev = 0 // never issued: matches no row
	}
	var deleted, existed bool
	q := s.forCall(key)
	if ss, ok := s.session(ctx); ok {
		if err := ss.ready(ctx); err != nil {
			return storeErr("delete", key, err)
		}
		q = ss.tx
	}
	if err := q.QueryRow(ctx, s.sql.delete, key, int64(rev)).Scan(&deleted, &existed); err != nil {
		return storeErr("delete", key, err)
	}
	switch {
	case deleted:
		return nil
	case existed:
		return fmt.Errorf("%w: %s is not at revision %d", saga.ErrConflict, key, rev)
	}
	return fmt.Errorf("%w: %s", saga.ErrNotFound, key)
}
