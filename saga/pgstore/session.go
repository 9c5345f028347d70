package pgstore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jetsaga/jetsaga/saga"
)

// The synchronized storage session: Store is a saga.UnitStore, so a
// dispatcher runs each step in a transaction of the store's pool, and Tx
// gives the step's handler that transaction for its own writes.

var _ saga.UnitStore = (*Store)(nil)

// session is a step's transaction, as the context Begin returns carries
// it. Its BEGIN goes out with its first statement, the step's load, in
// one round trip (pgx.Batch.BeginTx).
type session struct {
	store *Store
	tx    pgx.Tx // nil until the first statement
	mu    sync.Mutex
	ended bool // guarded by mu
}

type sessionKey struct{}

// Begin opens a transaction on the store's pool for a step (see
// saga.UnitStore): Load, Put, PutTTL and Delete with the context returned
// run in it until it ends, and Tx returns it to the step's handler. With
// WithLocking, Load in it locks the row (SELECT ... FOR UPDATE) until it
// ends.
//
// The transaction's BEGIN goes out with its first statement (the step's
// load of the record), in one round trip.
func (s *Store) Begin(ctx context.Context) (context.Context, saga.Unit, error) {
	ss := &session{store: s}
	return context.WithValue(ctx, sessionKey{}, ss), ss, nil
}

// Commit commits the step's transaction.
func (ss *session) Commit(ctx context.Context) error {
	ss.end()
	if ss.tx == nil {
		return nil // nothing was sent
	}
	if err := ss.tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: commit: %w", err)
	}
	return nil
}

// Rollback rolls the step's transaction back.
func (ss *session) Rollback(ctx context.Context) error {
	ss.end()
	if ss.tx == nil {
		return nil
	}
	if err := ss.tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return fmt.Errorf("pgstore: rollback: %w", err)
	}
	return nil
}

func (ss *session) end() {
	ss.mu.Lock()
	ss.ended = true
	ss.mu.Unlock()
}

func (ss *session) open() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return !ss.ended
}

// begin begins the transaction, unless it was.
func (ss *session) begin(ctx context.Context) error {
	if ss.tx != nil {
		return nil
	}
	tx, err := ss.store.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: begin: %w", err)
	}
	ss.tx = tx
	return nil
}

// queryRow runs a statement of one row in the transaction: with its
// BEGIN, in one round trip, if it is the first.
func (ss *session) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	if ss.tx != nil {
		return ss.tx.QueryRow(ctx, sql, args...).Scan(dest...)
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	row := b.Queue(sql, args...)
	var err error
	row.QueryRow(func(r pgx.Row) error {
		err = r.Scan(dest...)
		return nil
	})
	br := ss.store.pool.SendBatch(ctx, b)
	// The transaction holds the connection from here until it ends,
	// also if the batch failed: Rollback (or Commit) releases it.
	ss.tx = br.Tx()
	if cerr := br.Close(); cerr != nil {
		return cerr
	}
	return err
}

// sessionOf returns the open session ctx carries, if any.
func sessionOf(ctx context.Context) (*session, bool) {
	ss, ok := ctx.Value(sessionKey{}).(*session)
	if !ok || !ss.open() {
		return nil, false
	}
	return ss, true
}

// Tx returns the transaction of the step whose handler ctx was given to,
// when the dispatcher's store is a Store: the handler's writes in it
// commit with the saga's record, its inbox and its outbox, or roll back
// with them (a handler error, a conflict, a crash). ok is false outside a
// step's handler (or once the step's transaction ended).
//
// The handler must not Commit or Rollback it (the dispatcher does, after
// the handler returns), nor use it after it returned or from another
// goroutine; a nested transaction (tx.Begin) is a savepoint, and may be
// rolled back on its own.
func Tx(ctx context.Context) (tx pgx.Tx, ok bool) {
	ss, ok := sessionOf(ctx)
	if !ok || ss.begin(ctx) != nil { // begun by the step's load, in a step
		return nil, false
	}
	return ss.tx, true
}

// queryRow runs a statement of one row: in the step's session if ctx
// carries an open one of this store's, otherwise on the pool. It reports
// whether it ran in a session.
func (s *Store) queryRow(ctx context.Context, sql string, args []any, dest ...any) (bool, error) {
	if ss, ok := sessionOf(ctx); ok && ss.store == s {
		return true, ss.queryRow(ctx, sql, args, dest...)
	}
	return false, s.pool.QueryRow(ctx, sql, args...).Scan(dest...)
}

// inSession reports whether a call with ctx runs in a step's session.
func (s *Store) inSession(ctx context.Context) bool {
	ss, ok := sessionOf(ctx)
	return ok && ss.store == s
}

// WithoutSession returns the store without step transactions: a
// saga.ExpiringStore and saga.ListingStore on the same table that is not
// a saga.UnitStore. A dispatcher on it writes each record in one
// statement, as it does on kvstore, and keeps its record cache
// (saga.WithRecordCache), which saves most loads: for services whose
// handlers write nothing of their own in PostgreSQL, at a fraction of
// the session's cost per step (see BENCHMARKS.md). Tx then always reports
// false, and WithLocking has no effect.
func (s *Store) WithoutSession() *StoreWithoutSession { return &StoreWithoutSession{s: s} }

// StoreWithoutSession is a Store without step transactions (see
// Store.WithoutSession).
type StoreWithoutSession struct{ s *Store }

var (
	_ saga.ExpiringStore = (*StoreWithoutSession)(nil)
	_ saga.ListingStore  = (*StoreWithoutSession)(nil)
)

// Load is Store.Load.
func (p *StoreWithoutSession) Load(ctx context.Context, key string) ([]byte, uint64, error) {
	return p.s.Load(ctx, key)
}

// Put is Store.Put.
func (p *StoreWithoutSession) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	return p.s.Put(ctx, key, value, rev)
}

// PutTTL is Store.PutTTL.
func (p *StoreWithoutSession) PutTTL(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	return p.s.PutTTL(ctx, key, value, rev, ttl)
}

// Delete is Store.Delete.
func (p *StoreWithoutSession) Delete(ctx context.Context, key string, rev uint64) error {
	return p.s.Delete(ctx, key, rev)
}

// ListKeys is Store.ListKeys.
func (p *StoreWithoutSession) ListKeys(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return p.s.ListKeys(ctx, prefix)
}
