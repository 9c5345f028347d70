package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/pgstore"
)

// rideFixture is a store on a pool whose round trips are counted, with
// two records, a and b, outside any step.
type rideFixture struct {
	store  *pgstore.Store
	pool   *pgxpool.Pool
	count  *tripCounter
	ra, rb uint64
}

// newRideFixture makes the fixture on a pool of its own, configured
// further by configure if given.
func newRideFixture(t *testing.T, configure ...func(*pgxpool.Config)) *rideFixture {
	t.Helper()
	ctx := t.Context()
	f := &rideFixture{count: new(tripCounter)}
	pc, err := pgxpool.ParseConfig(pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.Tracer = f.count
	for _, c := range configure {
		c(pc)
	}
	if f.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.pool.Close)
	if err := pgstore.Migrate(ctx, f.pool); err != nil {
		t.Fatal(err)
	}
	if f.store, err = pgstore.New(ctx, f.pool); err != nil {
		t.Fatal(err)
	}
	// An update waits for the test's commit, however slow the machine.
	pgstore.SetRideWait(f.store, time.Minute)
	if f.ra, err = f.store.Put(ctx, "a", []byte("a1"), 0); err != nil {
		t.Fatal(err)
	}
	if f.rb, err = f.store.Put(ctx, "b", []byte("b1"), 0); err != nil {
		t.Fatal(err)
	}
	return f
}

// step opens a step's transaction that loads a and writes it at rev
// (the revision loaded, unless a test makes it another).
func (f *rideFixture) step(t *testing.T, rev func(loaded uint64) uint64) saga.Unit {
	t.Helper()
	uctx, u, err := f.store.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Ends it if the test did not (a failure): the pool's Close waits for
	// its connection.
	t.Cleanup(func() { _ = u.Rollback(context.WithoutCancel(t.Context())) })
	_, loaded, err := f.store.Load(uctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Put(uctx, "a", []byte("a2"), rev(loaded)); err != nil {
		t.Fatal(err)
	}
	return u
}

type putResult struct {
	rev uint64
	err error
}

// putB updates b at rev outside any step, in the background, and waits
// until it waits to ride.
func (f *rideFixture) putB(t *testing.T, rev uint64) <-chan putResult {
	t.Helper()
	done := make(chan putResult, 1)
	go func() {
		n, err := f.store.Put(context.WithoutCancel(t.Context()), "b", []byte("b2"), rev)
		done <- putResult{n, err}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for pgstore.RidersWaiting(f.store) == 0 {
		select {
		case r := <-done:
			t.Fatalf("the update of b did not wait to ride a step's commit: %v, %v", r.rev, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the update of b never waited to ride")
		}
		time.Sleep(50 * time.Microsecond) // polls the condition
	}
	return done
}

func (f *rideFixture) value(t *testing.T, key string) ([]byte, uint64) {
	t.Helper()
	v, rev, err := f.store.Load(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return v, rev
}

func same(loaded uint64) uint64 { return loaded }

// TestUpdateRidesAStepsCommit: an update outside a step, made while a
// step's transaction is open, goes out with that step's COMMIT: one
// round trip for both, the update committed, its new revision returned.
func TestUpdateRidesAStepsCommit(t *testing.T) {
	f := newRideFixture(t)
	u := f.step(t, same)
	done := f.putB(t, f.rb)
	trips := f.count.trips.Load()
	if err := u.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if got := f.count.trips.Load() - trips; got != 1 {
		t.Errorf("the commit and the update: got %d round trips, want 1 (the update rode the commit)", got)
	}
	v, rev := f.value(t, "b")
	if string(v) != "b2" || rev != r.rev || rev <= f.rb {
		t.Errorf("b after the ride: got %q at %d, Put returned %d; want b2 at the returned revision, above %d", v, rev, r.rev, f.rb)
	}
	if v, _ := f.value(t, "a"); string(v) != "a2" {
		t.Errorf("a after the commit: got %q, want a2", v)
	}
}

// TestRiderAtAnotherRevisionConflicts: an update that rides at a revision
// the row no longer has is not written by the commit; written on its own,
// it reports saga.ErrConflict.
func TestRiderAtAnotherRevisionConflicts(t *testing.T) {
	f := newRideFixture(t)
	u := f.step(t, same)
	done := f.putB(t, f.rb+1000)
	if err := u.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r := <-done; !errors.Is(r.err, saga.ErrConflict) {
		t.Errorf("an update at a revision b does not have: got %v, %v; want saga.ErrConflict", r.rev, r.err)
	}
	if v, rev := f.value(t, "b"); string(v) != "b1" || rev != f.rb {
		t.Errorf("b: got %q at %d, want b1 at %d", v, rev, f.rb)
	}
}

// TestRiderOfAFailedCommitWritesAlone: when the step's own write
// conflicts, its transaction rolls back, the update that rode it with
// it; the update is then written on its own.
func TestRiderOfAFailedCommitWritesAlone(t *testing.T) {
	f := newRideFixture(t)
	u := f.step(t, func(loaded uint64) uint64 { return loaded + 1000 })
	done := f.putB(t, f.rb)
	if err := u.Commit(t.Context()); !errors.Is(err, saga.ErrConflict) {
		t.Fatalf("a step's write at a revision a does not have: got %v, want saga.ErrConflict", err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if v, rev := f.value(t, "b"); string(v) != "b2" || rev != r.rev {
		t.Errorf("b: got %q at %d, want b2 at %d", v, rev, r.rev)
	}
	if v, rev := f.value(t, "a"); string(v) != "a1" || rev != f.ra {
		t.Errorf("a after its step rolled back: got %q at %d, want a1 at %d", v, rev, f.ra)
	}
}

// TestCommitDoesNotWaitForARidersRow: a step's commit never waits for a
// rider's row held by another transaction (two commits carrying each
// other's rows would deadlock): it commits without the rider, which
// then waits for the row on its own.
func TestCommitDoesNotWaitForARidersRow(t *testing.T) {
	f := newRideFixture(t)
	ctx := t.Context()
	holder, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // rolled back below
	if _, err := holder.Exec(ctx, "SELECT 1 FROM jetsaga_sagas WHERE key = 'b' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	u := f.step(t, same)
	done := f.putB(t, f.rb)
	committed := make(chan error, 1)
	go func() { committed <- u.Commit(ctx) }()
	select {
	case err := <-committed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the step's commit waited for the row of an update riding it")
	}
	select {
	case r := <-done:
		t.Fatalf("the update of a row another transaction holds returned before it was released: %v, %v", r.rev, r.err)
	default:
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if v, rev := f.value(t, "b"); string(v) != "b2" || rev != r.rev {
		t.Errorf("b: got %q at %d, want b2 at %d", v, rev, r.rev)
	}
}

// TestRiderKeepsItsExpiry: PutTTL rides with its expiry.
func TestRiderKeepsItsExpiry(t *testing.T) {
	f := newRideFixture(t)
	ctx := t.Context()
	u := f.step(t, same)
	done := make(chan putResult, 1)
	go func() {
		n, err := f.store.PutTTL(context.WithoutCancel(ctx), "b", []byte("b2"), f.rb, time.Hour)
		done <- putResult{n, err}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for pgstore.RidersWaiting(f.store) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Microsecond) // polls the condition
	}
	if err := u.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil {
		t.Fatal(r.err)
	}
	var left time.Duration
	if err := f.pool.QueryRow(ctx, "SELECT extract(epoch FROM expires_at - now()) * interval '1 second' FROM jetsaga_sagas WHERE key = 'b'").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left < 59*time.Minute || left > time.Hour {
		t.Errorf("b expires in %v, want about an hour", left)
	}
}

// TestRiderOfAStepThatDoesNotCommitWritesAlone: an update does not
// wait for a step's commit longer than a moment: with a step open that
// does not commit, it is written on its own.
func TestRiderOfAStepThatDoesNotCommitWritesAlone(t *testing.T) {
	f := newRideFixture(t)
	ctx := t.Context()
	pgstore.SetRideWait(f.store, 2*time.Millisecond)
	f.step(t, same) // left open, rolled back at the test's end
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := f.store.Put(pctx, "b", []byte("b2"), f.rb)
	if err != nil {
		t.Fatalf("an update while a step stays open: %v", err)
	}
	if v, rev := f.value(t, "b"); string(v) != "b2" || rev != n {
		t.Errorf("b: got %q at %d, want b2 at %d", v, rev, n)
	}
	if n := pgstore.RidersWaiting(f.store); n != 0 {
		t.Errorf("%d updates wait to ride, want 0", n)
	}
}

// TestNoRidesUnderRepeatableRead: on a database whose transactions are
// REPEATABLE READ by default, an update does not ride: riding a step's
// commit, the update of a row changed since that step's snapshot would
// fail the step with a serialization error. Here b changes after the
// step's load; the update of b is written on its own, and the step
// commits.
func TestNoRidesUnderRepeatableRead(t *testing.T) {
	f := newRideFixture(t, func(pc *pgxpool.Config) {
		pc.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	})
	u := f.step(t, same) // the step's snapshot, taken by its load of a
	// b changes after the snapshot, as a step of b's instance would.
	if _, err := f.pool.Exec(t.Context(), "UPDATE "+pgstore.DefaultTable+" SET value = 'b1x' WHERE key = 'b'"); err != nil {
		t.Fatal(err)
	}
	done := make(chan putResult, 1)
	go func() {
		n, err := f.store.Put(context.WithoutCancel(t.Context()), "b", []byte("b2"), f.rb)
		done <- putResult{n, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("the update of b: %v", r.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the update of b waited to ride a step's commit under REPEATABLE READ")
	}
	if err := u.Commit(t.Context()); err != nil {
		t.Fatalf("the step's commit: %v, want it committed", err)
	}
}
