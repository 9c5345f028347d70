package saga

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Changing one instance's record outside a step: CancelTimeouts,
// ReplanInstance, a migration's move, and a flush message all load the
// record, carry out the effects an earlier step left in its outbox (the
// next commit would overwrite them), apply their change, commit it, and
// carry out the effects the change added — again on fresh state after a
// conflict with a concurrent step.

// An update is a change to one instance's record outside a step.
type update struct {
	saga, id string
	// identity names the flush message that retries the change's effects
	// if they cannot be carried out at once.
	identity string
	// patient: an outbox with messages to send that a step committed
	// moments ago is left to that step for a little while (outboxWaits),
	// as a step leaves it.
	patient bool
	// failed says, in an error, that nothing changed: "no timeout
	// cancelled".
	failed string
	// change applies the change to rec and reports whether rec changed;
	// if not, nothing is committed. An error ends the update as it is.
	change func(rec *record) (bool, error)
	// pending says, in an ErrEffectsPending error, what was committed and
	// what failed: "re-planned in its state; rescheduling on the engines
	// failed".
	pending func() string
}

// updated is what an update did.
type updated struct {
	rec       *record // as last loaded, then changed (nil if none was)
	carried   bool    // it carried out an outbox an earlier step left
	committed bool    // the change is committed
}

// update loads the record of u's instance, carries out the outbox an
// earlier step left, applies u.change and commits it, running again on a
// freshly loaded record after a conflict (up to WithConflictRetries
// times), then carries out the effects the change added to the outbox. A
// failure to carry those out schedules a flush message to retry them and
// returns an error matching ErrEffectsPending, with committed set.
//
// An error from the load (ErrNotFound for a missing instance) or from
// change is returned as it is; one from carrying out the earlier outbox or
// from the commit, which says that nothing changed, starts with
// u.failed (as it is if u.failed is empty).
func (d *Dispatcher) update(ctx context.Context, u update) (updated, error) {
	key := storeKey(u.saga, u.id)
	waits, conflicts := 0, 0
	retry := func(err error) bool {
		if errors.Is(err, ErrConflict) && conflicts < d.cfg.conflicts {
			conflicts++
			return true
		}
		return false
	}
	for {
		now := d.cfg.now()
		rec, rev, err := d.load(ctx, key)
		if err != nil {
			return updated{}, err
		}
		res := updated{rec: rec}
		if len(rec.Outbox) > 0 {
			if u.patient && rec.HasSends() && waits < outboxWaits && now.Sub(rec.Updated) < outboxGrace {
				waits++
				if err := sleep(ctx, time.Millisecond<<waits); err != nil {
					return res, err
				}
				continue
			}
			if rev, err = d.carryOutAndClear(ctx, key, rec, rev); retry(err) {
				continue
			} else if err != nil {
				return res, u.unchanged("an earlier step's effects cannot be carried out: ", err)
			}
			res.carried = true
		}
		if changed, err := u.change(rec); err != nil || !changed {
			return res, err
		}
		rec.Updated = now
		if rev, err = d.records.commit(ctx, key, rec, rev); retry(err) {
			continue
		} else if err != nil {
			return res, u.unchanged("", err)
		}
		res.committed = true
		if _, err := d.carryOutAndClear(ctx, key, rec, rev); err != nil && !errors.Is(err, ErrConflict) {
			// The change is committed: the retry is registered also when
			// the caller stopped waiting (ctx ended), for a bounded time.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushRegisterTime)
			serr := d.scheduleFlush(fctx, u.saga, u.id, u.identity, 1)
			cancel()
			when := "will be retried"
			if serr != nil {
				when = "will be carried out with the instance's next step"
			}
			return res, fmt.Errorf("%w: saga %s/%s: %s and %s: %w",
				ErrEffectsPending, u.saga, u.id, u.pending(), when, errors.Join(err, serr))
		}
		return res, nil
	}
}

// flushRegisterTime bounds the scheduling of the message that retries a
// committed update's effects once the caller's context has ended.
const flushRegisterTime = 5 * time.Second

// unchanged is the error of an update that changed nothing.
func (u update) unchanged(why string, err error) error {
	if u.failed == "" {
		return err
	}
	return fmt.Errorf("saga %s/%s: %s: %s%w", u.saga, u.id, u.failed, why, err)
}
