package pgstore

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Cleanup removes the rows past their expiry, a batch at a time, and
// returns how many it removed. Expired rows are absent to every other
// method at once; Cleanup (or Run) only reclaims their space, and a
// create of the same key reuses the row in place. Several processes may
// clean up at the same time: each skips the rows another holds.
func (s *Store) Cleanup(ctx context.Context) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, s.sql.cleanup, s.batch)
		if err != nil {
			return total, fmt.Errorf("pgstore: removing expired rows of %s: %w", s.table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(s.batch) {
			return total, nil
		}
	}
}

// Run calls Cleanup every cleanup interval (WithCleanupInterval) until ctx
// ends, then returns nil. A failed cleanup is logged at Warn and tried
// again at the next interval. Run it in one or more of the service's
// processes, e.g. beside the dispatcher; without it, the tombstones of
// completed sagas (written with PutTTL) stay in the table, invisible,
// until their key is created again.
func (s *Store) Run(ctx context.Context) error {
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	for {
		n, err := s.Cleanup(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			s.logger.LogAttrs(ctx, slog.LevelWarn, "pgstore: cleanup failed", slog.String("table", s.table), slog.Any("error", err))
		default:
			s.logger.LogAttrs(ctx, slog.LevelDebug, "pgstore: expired rows removed", slog.String("table", s.table), slog.Int64("rows", n))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
