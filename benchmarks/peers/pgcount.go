package main

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// pgCount counts what a pool sends PostgreSQL, as a pgx tracer: the
// statements (BEGIN and COMMIT included), and the round trips, a batch
// being one. The statements pgx prepares for its statement cache (once
// per connection and statement) are not counted.
type pgCount struct {
	stmts, trips atomic.Int64
}

var (
	_ pgx.QueryTracer = (*pgCount)(nil)
	_ pgx.BatchTracer = (*pgCount)(nil)
)

func (c *pgCount) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.stmts.Add(1)
	c.trips.Add(1)
	return ctx
}

func (*pgCount) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *pgCount) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.trips.Add(1)
	return ctx
}

func (c *pgCount) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.stmts.Add(1)
}

func (*pgCount) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// snapshot returns the counts so far.
func (c *pgCount) snapshot() (stmts, trips int64) {
	if c == nil {
		return 0, 0
	}
	return c.stmts.Load(), c.trips.Load()
}
