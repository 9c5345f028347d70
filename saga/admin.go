package saga

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// Instance is what an operator sees of a saga instance.
type Instance struct {
	Saga, ID string
	Data     []byte // encoded with the dispatcher's codec; nil once completed
	// Completed is true for the tombstone of a completed instance, which
	// is kept for the retention (WithCompletedRetention).
	Completed bool
	Started   time.Time
	Updated   time.Time // the last step that changed it (completion, for a tombstone)
	Timeouts  []PendingTimeout
	// DataVersion is the version of the saga's data the record was
	// written with (see DataVersion): 1 for records written before
	// versions existed. Data is as stored, not upcast: InstanceOf
	// decodes and upcasts it.
	DataVersion int
	// PartitionKey is the instance's fairness key (PartitionKeyBy); empty
	// if it has none.
	PartitionKey string
}

// Instance returns the stored state of a saga instance, or ErrNotFound
// (never started, or completed longer ago than the retention).
//
// Data is encoded as stored; InstanceOf decodes it into the saga's type.
func (d *Dispatcher) Instance(ctx context.Context, sagaName, id string) (*Instance, error) {
	inst, _, err := d.instance(ctx, sagaName, id)
	return inst, err
}

func (d *Dispatcher) instance(ctx context.Context, sagaName, id string) (*Instance, *record, error) {
	if err := validateID(id); err != nil {
		return nil, nil, fmt.Errorf("%w: %s/%.64q: %w", ErrNotFound, sagaName, id, err)
	}
	rec, _, err := d.load(ctx, storeKey(sagaName, id))
	if err != nil {
		return nil, nil, err
	}
	s := &stepState{rec: rec}
	return &Instance{
		Saga: sagaName, ID: id, Data: rec.Data(), Completed: rec.Completed,
		Started: rec.Started, Updated: rec.Updated, Timeouts: s.pending(), DataVersion: rec.DataVersion(),
		PartitionKey: rec.PartitionKey,
	}, rec, nil
}

// ScheduledTimeout is a timeout an engine holds for a saga instance.
type ScheduledTimeout struct {
	Saga, ID string
	Type     string
	At       time.Time
	// Ref names the timeout on its engine (Ref.Engine() is "queue" for
	// the transport, "temporal" for Temporal).
	Ref timeout.Ref
	// Seq is the scheduled sequence number on the dispatcher's queue, for
	// a timeout on the transport engine; 0 on other engines.
	// transport.FormatSeq shows it as the jetsaga command does ("0:s20"),
	// and so does String.
	Seq uint64
	// Handle is the timeout's handle in its instance (see PendingTimeout).
	Handle TimeoutHandle
	// Rule and Calendar are those of a timeout requested by a rule
	// (Context.RequestTimeoutBy), as its message carries them
	// (PropertyRule, PropertyCalendar): the rule and the calendar version
	// its due time was computed with. Empty for other timeouts.
	Rule     string
	Calendar calendar.Ref
	// Activating is true for a timeout activated early and not yet due
	// (on JetStream by default, timeout.WithEarlyActivation): its message
	// is on the queue, held by a dispatcher until At or waiting to be
	// received, and Seq is its active sequence number ("0:20"). It can no
	// longer be cancelled on its engine (Ref's Cancel returns
	// timeout.ErrAlreadyFired), but cancelling it through the saga
	// (Context.CancelTimeout, Dispatcher.CancelTimeouts) still has it
	// dropped on arrival, never handled.
	Activating bool
}

// String describes the timeout on one line, its sequence number as the
// jetsaga command shows it (transport.FormatSeq, "0:s20"), and
// "activating" for one activated early:
//
//	dunning/inv-1 dunning.Remind due 2024-01-22T00:00:00Z seq 0:s2 (queue:sagatest:140737488355330@1705881600000000000)
func (st ScheduledTimeout) String() string {
	s := st.Saga + "/" + st.ID + " " + st.Type + " due " + st.At.UTC().Format(time.RFC3339Nano)
	if st.Activating {
		s += " activating"
	}
	if st.Seq != 0 {
		s += " seq " + transport.FormatSeq(st.Seq)
	}
	if st.Ref != "" {
		s += " (" + string(st.Ref) + ")"
	}
	return s
}

// ScheduledTimeouts lists the pending timeouts of saga sagaName (all
// sagas if empty) on every engine of the dispatcher's timeout scheduler
// (a timeout.Router lists each of its engines; the transport engine in
// sequence order, then the timeouts it activated early that are not due
// yet, marked Activating: see timeout.Queue.Pending for what that
// reads). An engine that cannot list its timeouts yields an error
// matching errors.ErrUnsupported; the listing goes on with the next
// engine if the caller continues.
func (d *Dispatcher) ScheduledTimeouts(ctx context.Context, sagaName string) iter.Seq2[ScheduledTimeout, error] {
	return func(yield func(ScheduledTimeout, error) bool) {
		for lt, err := range d.listedTimeouts(ctx, sagaName) {
			if !yield(lt.st, err) {
				return
			}
		}
	}
}

// CancelResult reports what an operator cancel did to one instance.
type CancelResult struct {
	Saga, ID string
	// Cancelled lists the timeouts cancelled: the instance no longer
	// waits for them, and their messages are cancelled (or, if one fired
	// meanwhile, dropped when it arrives). Sorted by due time.
	Cancelled []PendingTimeout
}

// CancelTimeouts cancels every pending timeout of one instance and forgets
// them in its state, so that the saga does not wait for them.
//
// It is a step like a handler's: it carries out any effects an earlier
// step left pending first, then commits the cancel (running again on
// fresh state after a conflict with a concurrent step), then cancels the
// timeouts' messages. The result lists exactly what was cancelled.
//
// An error means that no timeout was cancelled — ErrNotFound for a
// missing instance; an earlier step's effects that still cannot be carried
// out (a full destination queue, say) — with one exception: an error
// matching ErrEffectsPending says that the cancel was committed (the
// result lists what it cancelled) but cancelling the messages failed;
// they are cancelled later, like any step's pending effects, and would be
// dropped on arrival meanwhile. (A store failing in the middle of its
// write can leave the outcome unknown; Instance shows it.)
func (d *Dispatcher) CancelTimeouts(ctx context.Context, sagaName, id string) (CancelResult, error) {
	res := CancelResult{Saga: sagaName, ID: id}
	if err := validateID(id); err != nil {
		return res, fmt.Errorf("%w: %s/%.64q: %w", ErrNotFound, sagaName, id, err)
	}
	if _, err := d.open(ctx); err != nil {
		return res, err
	}
	var cancelled []PendingTimeout
	u, err := d.update(ctx, update{
		saga: sagaName, id: id, identity: "cancel:" + strconv.FormatInt(d.cfg.now().UnixNano(), 10),
		patient: true, failed: "no timeout cancelled",
		change: func(rec *record) (bool, error) {
			s := &stepState{d: d, sagaName: sagaName, id: id, key: storeKey(sagaName, id), rec: rec}
			cancelled = s.pending()
			for _, pt := range cancelled {
				s.cancelTimeout(string(pt.Handle))
			}
			return len(cancelled) > 0, nil
		},
		pending: func() string {
			return fmt.Sprintf("%d timeouts cancelled in its state; cancelling their messages failed", len(cancelled))
		},
	})
	if u.committed {
		res.Cancelled = cancelled
	}
	return res, err
}

// CancelAllTimeouts cancels the pending timeouts of every instance of
// sagaName that has one listed by ScheduledTimeouts (on every engine),
// see CancelTimeouts. It returns a
// result for each instance whose timeouts it cancelled — also when it
// returns an error, which joins the errors of the instances it could not
// cancel (an instance that no longer exists is skipped).
func (d *Dispatcher) CancelAllTimeouts(ctx context.Context, sagaName string) ([]CancelResult, error) {
	ids := make(map[string]bool)
	var errs []error
	for st, err := range d.ScheduledTimeouts(ctx, sagaName) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ids[st.ID] = true
	}
	var out []CancelResult
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		res, err := d.CancelTimeouts(ctx, sagaName, id)
		if len(res.Cancelled) > 0 {
			out = append(out, res)
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	return out, errors.Join(errs...)
}
