package pgstore

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/saga"
)

// The records of saga.Call are read and written outside the step's
// transaction — an intent must be durable before the call, not when the
// step commits — while that transaction holds a connection of the pool.
// Were they to take another connection of the same pool, steps holding
// every connection would each wait for one more, for good: with the
// defaults (a pool of max(4, cores) connections, 8 concurrent steps) the
// first burst of calls would stop the dispatcher. So they go through a
// pool of their own, made from the store's pool's configuration with at
// most callConns connections, which nothing holds for longer than one
// statement.

const callConns = 2

// callPools holds a Store's pool for the records of calls, made at the
// first use.
type callPools struct {
	once sync.Once
	pool *pgxpool.Pool
	err  error
}

// forCall returns the querier for key: the calls' pool for a record of a
// call (saga.CallKeyPrefix), else the store's pool.
func (s *Store) forCall(key string) querier {
	if !strings.HasPrefix(key, saga.CallKeyPrefix) {
		return s.pool
	}
	s.calls.once.Do(func() {
		cfg := s.pool.Config().Copy()
		cfg.MaxConns, cfg.MinConns = callConns, 0
		cfg.MaxConnIdleTime = time.Minute
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.calls.pool, s.calls.err = pgxpool.NewWithConfig(ctx, cfg)
		if s.calls.err != nil {
			s.logger.Error("pgstore: a pool for the records of calls: using the store's pool", "error", s.calls.err)
		}
	})
	if s.calls.err != nil {
		return s.pool // as good as it gets (logged above)
	}
	return s.calls.pool
}

// Close closes the connections the store opened of its own (those of
// saga.Call's records; see the package documentation). The pool given to
// New is the caller's to close.
func (s *Store) Close() {
	s.calls.once.Do(func() {}) // none made from now on
	if s.calls.pool != nil {
		s.calls.pool.Close()
	}
}
