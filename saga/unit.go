package saga

import (
	"context"
	"fmt"

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
	su := &stepUnit{u: u}
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
