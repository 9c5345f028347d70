package saga

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// Instance is what an operator sees of a saga instance.
type Instance struct {
	Saga, ID  string
	Data      []byte // encoded with the dispatcher's codec
	Completed bool
	Started   time.Time
	Updated   time.Time
	Timeouts  []PendingTimeout
}

// Instance returns the stored state of a saga instance, or ErrNotFound.
func (d *Dispatcher) Instance(ctx context.Context, sagaName, id string) (*Instance, error) {
	if err := validateID(id); err != nil {
		return nil, fmt.Errorf("%w: %s/%.64q: %w", ErrNotFound, sagaName, id, err)
	}
	raw, _, err := d.store.Load(ctx, storeKey(sagaName, id))
	if err != nil {
		return nil, err
	}
	rec, err := decodeRecord(raw)
	if err != nil {
		return nil, fmt.Errorf("saga %s/%s: stored record unreadable: %w", sagaName, id, err)
	}
	s := &step{rec: rec}
	return &Instance{
		Saga: sagaName, ID: id, Data: rec.data(), Completed: rec.Completed,
		Started: rec.Started, Updated: rec.Updated, Timeouts: s.pending(),
	}, nil
}

// ScheduledTimeout is a timeout waiting in the dispatcher's queue.
type ScheduledTimeout struct {
	Saga, ID string
	Type     string
	At       time.Time
	Seq      uint64 // scheduled sequence number on the queue
}

// ScheduledTimeouts lists the timeouts waiting in the dispatcher's queue,
// of saga sagaName (all sagas if empty), in sequence order. It browses the
// queue; engines other than the transport (Temporal) are not included.
func (d *Dispatcher) ScheduledTimeouts(ctx context.Context, sagaName string) iter.Seq2[ScheduledTimeout, error] {
	return func(yield func(ScheduledTimeout, error) bool) {
		q, err := d.open(ctx)
		if err != nil {
			yield(ScheduledTimeout{}, err)
			return
		}
		for m, err := range q.Browse(ctx, 0) {
			if err != nil {
				yield(ScheduledTimeout{}, err)
				return
			}
			name, ok := m.Properties[propSaga]
			if m.State != transport.Scheduled || !ok || sagaName != "" && name != sagaName {
				continue
			}
			st := ScheduledTimeout{Saga: name, ID: m.Properties[propSagaID], Type: m.Properties[propType], At: m.ScheduledAt, Seq: m.Seq}
			if !yield(st, nil) {
				return
			}
		}
	}
}

// CancelTimeouts cancels every pending timeout of one instance and forgets
// them in its state, so that the saga does not wait for them. It returns
// how many it cancelled.
func (d *Dispatcher) CancelTimeouts(ctx context.Context, sagaName, id string) (int, error) {
	key := storeKey(sagaName, id)
	for {
		raw, rev, err := d.store.Load(ctx, key)
		if err != nil {
			return 0, err
		}
		rec, err := decodeRecord(raw)
		if err != nil {
			return 0, err
		}
		n := len(rec.Timeouts)
		if n == 0 {
			return 0, nil
		}
		s := &step{rec: rec}
		for _, tok := range slices.Sorted(maps.Keys(rec.Timeouts)) {
			s.cancelTimeout(tok)
		}
		b, err := encodeRecord(rec)
		if err != nil {
			return 0, err
		}
		rev, err = d.store.Put(ctx, key, b, rev)
		if errors.Is(err, ErrConflict) {
			continue
		}
		if err != nil {
			return 0, err
		}
		_, err = d.flush(ctx, key, rec, rev)
		if err != nil && !errors.Is(err, ErrConflict) {
			return n, err
		}
		return n, nil
	}
}

// CancelAllTimeouts cancels the pending timeouts of every instance of
// sagaName that has one waiting in the dispatcher's queue.
func (d *Dispatcher) CancelAllTimeouts(ctx context.Context, sagaName string) (int, error) {
	ids := make(map[string]bool)
	for st, err := range d.ScheduledTimeouts(ctx, sagaName) {
		if err != nil {
			return 0, err
		}
		ids[st.ID] = true
	}
	total := 0
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		n, err := d.CancelTimeouts(ctx, sagaName, id)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return total, err
		}
		total += n
	}
	return total, nil
}
