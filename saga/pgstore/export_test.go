package pgstore

import (
	"strings"
	"time"
)

// ReuseRevisions breaks s for the conformance suite's own test: each row
// counts its revisions from 1 (a create writes 1, an update rev + 1), the
// mistake a per-row counter makes, instead of drawing them from the
// table's sequence.
func ReuseRevisions(s *Store) {
	next := "nextval('" + s.names.seq + "')"
	s.sql.create = strings.Replace(s.sql.create, next, "1", 1)
	s.sql.update = strings.Replace(s.sql.update, next, "rev + 1", 1)
}

// SetListPage sets how many keys ListKeys reads per query.
func SetListPage(s *Store, n int) { s.listPage = n }

// RidersWaiting is how many updates wait to ride a step's COMMIT.
func RidersWaiting(s *Store) int {
	s.rides.mu.Lock()
	defer s.rides.mu.Unlock()
	return len(s.rides.waiting)
}

// SetRideWait sets the longest an update waits to ride a step's COMMIT,
// and makes it wait that long, once one step's transaction is open.
func SetRideWait(s *Store, d time.Duration) {
	s.rides.mu.Lock()
	defer s.rides.mu.Unlock()
	s.rides.max, s.rides.last, s.rides.gap, s.rides.busy = d, time.Time{}, 0, 1
}
