package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// stepTx is a step's transaction as Tx gives it to the handler: pgx's,
// which the session commits on its connection in a batch with the
// record's write (see session), and which must then not be used again:
// each method returns pgx.ErrTxClosed once the session ended.
type stepTx struct {
	ss *session
	tx pgx.Tx
}

var _ pgx.Tx = (*stepTx)(nil)

// errDispatcherEnds is what Commit and Rollback of a step's transaction
// return.
var errDispatcherEnds = errors.New("pgstore: the dispatcher commits or rolls back the step's transaction, after the handler returns")

// live returns pgx.ErrTxClosed once the step's transaction ended, and
// sends the record's write if a Put left one before the handler's
// statement.
func (t *stepTx) live(ctx context.Context) error {
	if !t.ss.open() {
		return pgx.ErrTxClosed
	}
	return t.ss.ready(ctx)
}

// Begin makes a savepoint (pgx's nested transaction).
func (t *stepTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.live(ctx); err != nil {
		return nil, err
	}
	return t.tx.Begin(ctx)
}

// Commit returns an error: the dispatcher commits the step's transaction.
func (t *stepTx) Commit(context.Context) error { return errDispatcherEnds }

// Rollback returns an error: the dispatcher rolls the step's transaction
// back when the handler returns an error.
func (t *stepTx) Rollback(context.Context) error { return errDispatcherEnds }

func (t *stepTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error) {
	if err := t.live(ctx); err != nil {
		return 0, err
	}
	return t.tx.CopyFrom(ctx, table, columns, rows)
}

func (t *stepTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.live(ctx); err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return t.tx.SendBatch(ctx, b)
}

func (t *stepTx) LargeObjects() pgx.LargeObjects { return t.tx.LargeObjects() }

func (t *stepTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.live(ctx); err != nil {
		return nil, err
	}
	return t.tx.Prepare(ctx, name, sql)
}

func (t *stepTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.live(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.tx.Exec(ctx, sql, args...)
}

func (t *stepTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.live(ctx); err != nil {
		return nil, err
	}
	return t.tx.Query(ctx, sql, args...)
}

func (t *stepTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.live(ctx); err != nil {
		return errRow{err}
	}
	return t.tx.QueryRow(ctx, sql, args...)
}

// Conn returns the step's connection, or nil once the step's transaction
// ended.
func (t *stepTx) Conn() *pgx.Conn {
	if !t.ss.open() {
		return nil
	}
	return t.tx.Conn()
}

// errRow is a pgx.Row that is an error.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
