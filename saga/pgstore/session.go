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
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/saga"
)

// The synchronized storage session: Store is a saga.UnitStore, so a
// dispatcher runs each step in a transaction of the store's pool, and Tx
// gives the step's handler that transaction for its own writes.

var _ saga.UnitStore = (*Store)(nil)

// session is a step's transaction, as the context Begin returns carries
// it. A step's statements take three round trips beside the handler's:
//
//	BEGIN, the load of the record, revisions drawn for its writes   (one batch)
//	the handler's statements
//	the writes of the record (and its index entries), COMMIT       (one batch)
//
// Each write is conditional on the revision it was given, as outside a
// session; one that matches no row fails the transaction (see
// statements), and Commit reports saga.ErrConflict.
type session struct {
	store  *Store
	conn   *pgxpool.Conn // from the first statement to the end
	tx     pgx.Tx        // on conn, begun with the first statement
	next   []int64       // revisions drawn with the load, for the writes
	writes []*write      // writes left for the COMMIT, in order
	mu     sync.Mutex
	ended  bool // guarded by mu
}

// drawnRevisions is how many revisions a step's load draws for the
// writes that go out with its COMMIT: the record's and up to three index
// entries' (saga.Index), which a step that starts an instance of a saga
// with indexes writes in its transaction. Further writes go out at once.
const drawnRevisions = 4

// write is a write of the record that a session sends with its COMMIT.
type write struct {
	key  string
	rev  uint64 // the revision it is conditional on
	sql  string
	args []any
}

type sessionKey struct{}

// Begin opens a transaction on the store's pool for a step (see
// saga.UnitStore): Load, Put, PutTTL and Delete with the context returned
// run in it until it ends, and Tx returns it to the step's handler. With
// WithLocking, Load in it locks the row (SELECT ... FOR UPDATE) until it
// ends.
//
// The transaction's BEGIN goes out with its first statement (the step's
// load of the record), and a Put after the load goes out with the
// COMMIT: a Put in the transaction returns the record's new revision at
// once, and Commit reports saga.ErrConflict if the record's revision
// changed since the load (with WithLocking it cannot, but for a record
// two steps create at once).
func (s *Store) Begin(ctx context.Context) (context.Context, saga.Unit, error) {
	ss := &session{store: s}
	return context.WithValue(ctx, sessionKey{}, ss), ss, nil
}

// Commit sends the writes Puts left, if any, with the COMMIT, and the
// updates waiting to ride it (see rides).
func (ss *session) Commit(ctx context.Context) error {
	if !ss.end() {
		return pgx.ErrTxClosed
	}
	if ss.conn == nil {
		return nil // nothing was sent
	}
	// A connection left in a transaction (a failure) is closed, not
	// reused.
	defer ss.release()
	ws := ss.writes
	ss.writes = nil
	own := make([]string, len(ws))
	for i, w := range ws {
		own[i] = w.key
	}
	riders := ss.store.rides.take(own...)
	if len(ws) == 0 && len(riders) == 0 {
		if err := ss.tx.Commit(ctx); err != nil {
			return storeErr("commit", "", err)
		}
		return nil
	}
	var written map[string]int64
	defer func() { answer(riders, written) }()
	b := &pgx.Batch{}
	for _, w := range ws {
		b.Queue(w.sql, w.args...)
	}
	for _, x := range riders {
		b.Queue(ss.store.sql.ride, x.key, x.value, x.ttl, x.rev)
	}
	b.Queue("commit")
	br := ss.conn.SendBatch(ctx, b)
	var err error
	for _, w := range ws {
		var n int64
		if err = br.QueryRow().Scan(&n); err != nil {
			err = writeError(w, err)
			break
		}
	}
	var rode map[string]int64
	if err == nil && len(riders) > 0 {
		rode, err = scanRiders(br, riders)
	}
	var tag pgconn.CommandTag
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = ss.tx.Rollback(ctx) // the transaction failed: its end
		return storeErr("commit", "", err)
	}
	if tag.String() == "ROLLBACK" {
		return fmt.Errorf("pgstore: commit: %w", pgx.ErrTxCommitRollback)
	}
	written = rode
	return nil
}

// scanRiders reads the riders' statements' results: the revision written
// for each rider it wrote.
func scanRiders(br pgx.BatchResults, riders []*rider) (map[string]int64, error) {
	rode := make(map[string]int64, len(riders))
	for _, x := range riders {
		var rev int64
		switch err := br.QueryRow().Scan(&rev); {
		case err == nil:
			rode[x.key] = rev
		case !errors.Is(err, pgx.ErrNoRows):
			return nil, err
		}
	}
	return rode, nil
}

// writeError is the error of a failed write of the record.
func writeError(w *write, err error) error {
	var pe *pgconn.PgError
	switch {
	case !errors.As(err, &pe) || pe.Code != "22012": // division_by_zero: no row written
		return fmt.Errorf("put %s: %w", w.key, err)
	case w.rev == 0:
		return fmt.Errorf("%w: %s exists", saga.ErrConflict, w.key)
	}
	return fmt.Errorf("%w: %s is not at revision %d", saga.ErrConflict, w.key, w.rev)
}

// Rollback rolls the step's transaction back.
func (ss *session) Rollback(ctx context.Context) error {
	if !ss.end() {
		return nil // ended already
	}
	if ss.conn == nil {
		return nil
	}
	defer ss.release()
	if err := ss.tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return storeErr("rollback", "", err)
	}
	return nil
}

// release gives the connection back to the pool: the transaction ended.
func (ss *session) release() {
	ss.conn.Release()
	ss.store.rides.ended()
}

// end ends the session, and reports whether it was open.
func (ss *session) end() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	was := !ss.ended
	ss.ended = true
	return was
}

func (ss *session) open() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return !ss.ended
}

// ready makes the transaction ready for a statement: begun (by itself, if
// no load began it), and the writes Puts left sent.
func (ss *session) ready(ctx context.Context) error {
	if err := ss.begin(ctx); err != nil {
		return err
	}
	ws := ss.writes
	ss.writes = nil
	for _, w := range ws {
		var n int64
		if err := ss.tx.QueryRow(ctx, w.sql, w.args...).Scan(&n); err != nil {
			return writeError(w, err)
		}
	}
	return nil
}

// begin begins the transaction by itself, if no load began it.
func (ss *session) begin(ctx context.Context) error {
	if ss.conn == nil {
		conn, err := ss.store.rides.acquire(ctx, ss.store.pool)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			conn.Release()
			return fmt.Errorf("begin: %w", err)
		}
		ss.conn, ss.tx = conn, tx
		ss.store.rides.begun()
	}
	return nil
}

// load loads the record with stmt: with the transaction's BEGIN, and
// revisions drawn for the writes, in one round trip if it is the first
// statement.
func (ss *session) load(ctx context.Context, stmt, key string, value *[]byte, rev *int64) error {
	if ss.conn != nil {
		if err := ss.ready(ctx); err != nil {
			return err
		}
		return ss.tx.QueryRow(ctx, stmt, key).Scan(value, rev)
	}
	conn, err := ss.store.rides.acquire(ctx, ss.store.pool)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	var loadErr error
	b.Queue(stmt, key).QueryRow(func(r pgx.Row) error {
		loadErr = r.Scan(value, rev)
		return nil
	})
	b.Queue(ss.store.sql.next, drawnRevisions).Query(func(rows pgx.Rows) error {
		next, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		ss.next = next
		return err
	})
	br := conn.SendBatch(ctx, b)
	// From here the transaction holds the connection until it ends, also
	// if the batch failed: Rollback releases it.
	ss.conn, ss.tx = conn, br.Tx()
	ss.store.rides.begun()
	if err := br.Close(); err != nil {
		ss.next = nil
		return err
	}
	return loadErr
}

// put is Store.put in the transaction: after a load, it leaves the write
// for Commit to send (deferred), at a revision drawn with the load, while
// there are some left.
func (ss *session) put(ctx context.Context, key string, value []byte, rev uint64, ttlMicros *int64) (n uint64, deferred bool, err error) {
	if len(ss.next) == 0 {
		// Written at once, after the writes left before it.
		if err := ss.ready(ctx); err != nil {
			return 0, false, storeErr("put", key, err)
		}
		return 0, false, nil
	}
	if err := ss.begin(ctx); err != nil {
		return 0, false, storeErr("put", key, err)
	}
	next := ss.next[0]
	ss.next = ss.next[1:]
	w := &write{key: key, rev: rev}
	if rev == 0 {
		w.sql, w.args = ss.store.sql.createAt, []any{key, value, ttlMicros, next}
	} else {
		w.sql, w.args = ss.store.sql.updateAt, []any{key, value, ttlMicros, int64(rev), next}
	}
	ss.writes = append(ss.writes, w)
	return uint64(next), true, nil
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
// the handler returns: they return an error), nor use it after it
// returned (it then returns pgx.ErrTxClosed) or from another goroutine; a
// nested transaction (tx.Begin) is a savepoint, and may be committed or
// rolled back on its own.
func Tx(ctx context.Context) (tx pgx.Tx, ok bool) {
	ss, ok := sessionOf(ctx)
	if !ok || ss.ready(ctx) != nil { // begun by the step's load, in a step
		return nil, false
	}
	return &stepTx{ss: ss, tx: ss.tx}, true
}

// querier is what the store's statements run on: a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// session returns the step's session ctx carries, if it is open and of
// this store.
func (s *Store) session(ctx context.Context) (*session, bool) {
	if ss, ok := sessionOf(ctx); ok && ss.store == s {
		return ss, true
	}
	return nil, false
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
