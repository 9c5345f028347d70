package pgstore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jetsaga/jetsaga/saga"
)

// The synchronized storage session: Store is a saga.UnitStore, so a
// dispatcher runs each step in a transaction of the store's pool, and Tx
// gives the step's handler that transaction for its own writes.

var _ saga.UnitStore = (*Store)(nil)

// session is a step's transaction, as the context Begin returns carries
// it.
type session struct {
	store *Store
	tx    pgx.Tx
	mu    sync.Mutex // guards ended
	ended bool
}

type sessionKey struct{}

// Begin opens a transaction on the store's pool for a step (see
// saga.UnitStore): Load, Put, PutTTL and Delete with the context returned
// run in it until it ends, and Tx returns it to the step's handler. With
// WithLocking, Load in it locks the row (SELECT ... FOR UPDATE) until it
// ends.
func (s *Store) Begin(ctx context.Context) (context.Context, saga.Unit, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return ctx, nil, fmt.Errorf("pgstore: begin: %w", err)
	}
	ss := &session{store: s, tx: tx}
	return context.WithValue(ctx, sessionKey{}, ss), ss, nil
}

// Commit commits the step's transaction.
func (ss *session) Commit(ctx context.Context) error {
	ss.end()
	if err := ss.tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: commit: %w", err)
	}
	return nil
}

// Rollback rolls the step's transaction back.
func (ss *session) Rollback(ctx context.Context) error {
	ss.end()
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
	if !ok {
		return nil, false
	}
	return ss.tx, true
}

// querier is what the store's statements run on: a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// db returns where a call with ctx runs: in the step's transaction if ctx
// carries one of this store's that is open, otherwise on the pool.
func (s *Store) db(ctx context.Context) (querier, bool) {
	if ss, ok := sessionOf(ctx); ok && ss.store == s {
		return ss.tx, true
	}
	return s.pool, false
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
