package pgstore

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Rides: an update outside a step's transaction (Put or PutTTL with a
// revision, and no session in ctx), made while the pool's connections are
// scarce, waits a moment for a step's transaction to commit, and goes out
// with that COMMIT, in the same round trip and the same transaction,
// rather than as a transaction of its own: a statement each, pipelined
// behind the step's write. The dispatcher makes such an update after
// every step that sends a message (it writes the record again, without
// its outbox, once the messages are out: see docs/postgres.md), so when
// steps wait for connections most of them ride and cost neither a round
// trip nor a commit.
//
// A ride changes nothing for the caller: Put returns once the update is
// committed, with its new revision, or saga.ErrConflict. The riders'
// statements lock their rows with SKIP LOCKED, so that a commit never
// waits for a row another transaction holds (two commits carrying each
// other's rows would deadlock); a rider whose row it did not update — at
// another revision, expired, locked — and every rider of a commit that
// failed, or of one that did not come within rideWait, is written on its
// own, as it would have been without rides, and that write tells a
// conflict.

// rideWait is the longest an update waits for a step's COMMIT to ride:
// it waits about twice the time between commits of late, and not at all
// if that is longer than rideWait (see rides.ride).
const rideWait = 2 * time.Millisecond

// maxRiders is the most updates one COMMIT carries.
const maxRiders = 64

// A rider is an update waiting to ride.
type rider struct {
	key   string
	value []byte
	ttl   *int64 // microseconds; nil: kept for good
	rev   int64
	done  chan rideResult // the commit that took it answers once
}

// rideResult is what became of a rider: written at rev, or not written by
// the commit it rode (ok false): then it writes on its own.
type rideResult struct {
	rev int64
	ok  bool
}

// rides are a store's riders and the steps' transactions they may ride.
type rides struct {
	// off: the database's transactions are not READ COMMITTED by default,
	// so a rider's row, updated since the step's snapshot, would fail the
	// step's whole transaction with a serialization error (see New).
	off     bool
	mu      sync.Mutex
	open    int           // steps' transactions begun and not ended
	busy    int           // open from which updates ride: the pool's connections
	queued  int           // steps waiting for a connection of the pool
	waiting []*rider      // in arrival order
	max     time.Duration // the longest wait: rideWait (tests change it)
	last    time.Time     // the last commit
	gap     time.Duration // between commits, a moving average
}

// acquire acquires a connection for a step's transaction, counting the
// steps waiting for one.
func (r *rides) acquire(ctx context.Context, pool *pgxpool.Pool) (*pgxpool.Conn, error) {
	r.mu.Lock()
	r.queued++
	r.mu.Unlock()
	conn, err := pool.Acquire(ctx)
	r.mu.Lock()
	r.queued--
	r.mu.Unlock()
	return conn, err
}

// begun and ended count the steps' transactions that may commit.
func (r *rides) begun() {
	r.mu.Lock()
	r.open++
	r.mu.Unlock()
}

func (r *rides) ended() {
	r.mu.Lock()
	r.open--
	r.mu.Unlock()
}

// ride waits for a commit to carry the update x. ok is false if none did
// (none was open, none came within rideWait, ctx ended, or the one that
// took it did not write it): then the caller writes it on its own, or
// returns ctx's error.
//
// It rides only while connections are scarce — every connection of the
// pool is in a step's transaction, or steps wait for one — and
// waits about twice the average time between commits: the dispatcher's
// step waits for its update before it settles its message, and a
// dispatcher with no more concurrent steps than connections ran slower
// with its steps held waiting than with a round trip each.
func (r *rides) ride(ctx context.Context, x *rider) (rev int64, ok bool) {
	if r.off {
		return 0, false
	}
	r.mu.Lock()
	wait := 2 * r.gap
	if r.gap == 0 {
		wait = r.max // no two commits yet to measure
	}
	if r.open == 0 || r.open < r.busy && r.queued == 0 || wait > r.max {
		r.mu.Unlock()
		return 0, false
	}
	x.done = make(chan rideResult, 1)
	r.waiting = append(r.waiting, x)
	r.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case res := <-x.done:
		return res.rev, res.ok
	case <-t.C:
	case <-ctx.Done():
	}
	if r.leave(x) {
		return 0, false
	}
	res := <-x.done // taken by a commit in flight: its answer comes
	return res.rev, res.ok
}

// leave removes x from the riders waiting, if no commit took it.
func (r *rides) leave(x *rider) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, w := range r.waiting {
		if w == x {
			r.waiting = append(r.waiting[:i], r.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// take takes up to maxRiders riders for a commit, one per key, none for
// own (the keys the committing step writes).
func (r *rides) take(own ...string) []*rider {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch d := now.Sub(r.last); {
	case r.last.IsZero():
	case r.gap == 0:
		r.gap = d
	default:
		r.gap += (d - r.gap) / 8
	}
	r.last = now
	if len(r.waiting) == 0 {
		return nil
	}
	var took []*rider
	rest := r.waiting[:0]
	for _, x := range r.waiting {
		if len(took) < maxRiders && !slices.Contains(own, x.key) && !hasKey(took, x.key) {
			took = append(took, x)
		} else {
			rest = append(rest, x)
		}
	}
	clear(r.waiting[len(rest):])
	r.waiting = rest
	return took
}

func hasKey(rs []*rider, key string) bool {
	for _, x := range rs {
		if x.key == key {
			return true
		}
	}
	return false
}

// answer tells each rider what the commit did: written is the revision
// written for each key the riders' statements updated, nil if the commit
// failed.
func answer(riders []*rider, written map[string]int64) {
	for _, x := range riders {
		rev, ok := written[x.key]
		x.done <- rideResult{rev: rev, ok: ok}
	}
}
