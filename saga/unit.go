package saga

import (
	"context"
	"fmt"
	"sync"

	"github.com/jetsaga/jetsaga/transport"
)

// The unit stage: with a UnitStore, each attempt of a step runs in a unit
// of work the store opens — load, handler, commit of the record — which
// commits as the record does and rolls back on every other way out, the
// handler's own writes with it. Effects are carried out after it commits
// (see UnitStore).

// stepUnit is the unit of work an attempt runs in.
type stepUnit struct {
	u     Unit
	ended bool
	outer context.Context // the attempt's context outside the unit (see Call)
}

// commit commits the unit the attempt runs in, if it runs in one.
func (u *stepUnit) commit(ctx context.Context) error {
	if u == nil {
		return nil
	}
	u.ended = true
	if err := u.u.Commit(ctx); err != nil {
		return fmt.Errorf("saga: committing the step's unit of work: %w", err)
	}
	return nil
}

// attemptInUnit is attempt in a unit of work of us: always on a record
// loaded in the unit, never a cached one. An attempt that comes to a
// decision without a commit of the record (a duplicate, a dropped
// timeout, a not-found handler) commits the unit as it is; one that fails,
// or panics, rolls it back.
func (d *Dispatcher) attemptInUnit(ctx context.Context, us UnitStore, t *target, key, identity string, del *transport.Delivery, patient bool) (o Outcome, err error) {
	uctx, u, err := us.Begin(ctx)
	if err != nil {
		return "", fmt.Errorf("saga %s/%s: beginning a unit of work: %w", t.rt.Name(), t.id, err)
	}
	su := &stepUnit{u: u, outer: ctx}
	defer func() {
		if !su.ended {
			// Its error says no more than err (or the panic) does: the
			// unit's writes are not committed either way.
			_ = u.Rollback(context.WithoutCancel(ctx))
		}
	}()
	o, err = d.attempt(uctx, su, t, key, identity, del, patient, false)
	if err == nil && !su.ended {
		if err := su.commit(uctx); err != nil {
			return "", err
		}
	}
	return o, err
}

// unitRecords are records in a UnitStore. Its steps always load the
// record, in their unit, so there is no record cache; but, as with the
// cache, a step that committed an outbox of timeouts only and carried it
// out leaves it in the stored record until the next commit on the
// instance (see carryOutInMemory), rather than writing the record a second
// time, outside its unit, to clear it. It notes the record as carried out,
// by revision, so that the next step on the instance, if it loads that
// revision here, starts from the note and does not schedule the timeouts
// again; elsewhere (another dispatcher, after a restart, a note evicted),
// a step that loads the record carries the outbox out again, which is
// harmless at any time.
type unitRecords struct {
	records
	mu      sync.Mutex
	max     int
	carried map[string]cachedRecord // the record as carried out, at its revision
}

func newUnitRecords(next records, max int) *unitRecords {
	return &unitRecords{records: next, max: max, carried: make(map[string]cachedRecord)}
}

// load loads the record, in the unit ctx carries, and takes the note of
// its outbox as carried out if there is one for the revision loaded:
// revisions are never reused for a key (the Store rule), so the note is
// the stored record with its outbox carried out.
func (u *unitRecords) load(ctx context.Context, key string, _ bool) (*record, uint64, bool, error) {
	rec, rev, _, err := u.records.load(ctx, key, false)
	if err != nil || len(rec.Outbox) == 0 {
		return rec, rev, false, err
	}
	u.mu.Lock()
	e, ok := u.carried[key]
	u.mu.Unlock()
	if ok && e.rev == rev {
		return e.rec.Clone(), rev, false, nil
	}
	return rec, rev, false, nil
}

// commit writes rec; once it did, a note of the record it replaced is of
// no more use.
func (u *unitRecords) commit(ctx context.Context, key string, rec *record, rev uint64) (uint64, error) {
	n, err := u.records.commit(ctx, key, rec, rev)
	if err == nil {
		u.mu.Lock()
		delete(u.carried, key)
		u.mu.Unlock()
	}
	return n, err
}

// keepOutbox keeps an outbox of timeouts in the stored record, and notes
// rec, without it, as the record stored at rev.
func (u *unitRecords) keepOutbox(key string, rev uint64, rec *record) bool {
	cp := rec.Clone()
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.carried[key]; !ok && len(u.carried) >= u.max {
		for k := range u.carried { // forget one note, an arbitrary one
			delete(u.carried, k)
			break
		}
	}
	u.carried[key] = cachedRecord{rec: cp, rev: rev}
	return true
}
