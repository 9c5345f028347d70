package saga

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
)

// Liveness: a saga defined with CheckLiveness says, at each step, what a
// running instance waits for — a pending timeout, or a message it expects
// (Context.Expect). An instance that waits for neither is stuck: nothing
// will ever move it on. sagatest fails a test that leaves one;
// Dispatcher.StuckInstances lists them in production.
//
// The record keeps the expected messages in Expects, written with
// omitzero: nil (the key absent) for a step of a saga without
// CheckLiveness, an empty list for a step that expects nothing, so that a
// record says by itself whether its instance is checked — also to tools
// that read records without the saga's definition (the jetsaga command).

// CheckLiveness turns the liveness rule on for the saga: at the end of
// every step, a running instance must wait for something — a pending
// timeout, or a message that the step declared with Context.Expect.
// Expectations last one step: each step that runs a handler starts with
// none, so a handler states what the instance waits for now.
//
// An instance that waits for nothing is stuck. The rule is not enforced
// in the step (such a step commits as any other): sagatest fails a test
// that leaves a stuck instance, and Dispatcher.StuckInstances (and the
// jetsaga command's "sagas stuck") lists them. An instance is checked
// from its first step under a definition with CheckLiveness.
func CheckLiveness() DefinitionOption {
	return func(c *definitionConfig) { c.liveness = true }
}

// Expect declares that the instance waits for a message of each type
// named (its MessageName, or an alias of it, see Aliased), until the next
// step: each step that runs a handler starts with no expectation. Calls
// add up. For a saga with CheckLiveness, an instance with no pending
// timeout and no expected message at the end of a step is stuck;
// without it, Expect only documents the instance (sagatest's journal
// shows it).
//
// A name that the saga does not start or handle (StartedBy, Handles) is
// refused with an error matching ErrUnknownMessage and ErrPermanent:
// such a message could never arrive.
func (c *Context[S]) Expect(names ...string) error {
	return c.step.expect(names)
}

func (s *stepState) expect(names []string) error {
	for _, n := range names {
		if kind, ok := s.rt.lookup(n); !ok || kind == routeTimeout {
			return Permanent(fmt.Errorf("saga %s/%s: expecting %q: %w: the saga does not start or handle it", s.sagaName, s.id, n, ErrUnknownMessage))
		}
	}
	if s.rec.Expects == nil {
		s.rec.Expects = []string{}
	}
	for _, n := range names {
		if !slices.Contains(s.rec.Expects, n) {
			s.rec.Expects = append(s.rec.Expects, n)
		}
	}
	return nil
}

// resetExpects starts a step's expectations: none, checked if the saga
// has CheckLiveness.
func resetExpects(rec *record, liveness bool) {
	rec.Expects = nil
	if liveness {
		rec.Expects = []string{}
	}
}

// stuck reports whether the record's instance is stuck: running, checked
// for liveness, and waiting for nothing.
func stuck(r *record) bool {
	return !r.Completed && !r.Started.IsZero() && r.Expects != nil && len(r.Expects) == 0 && len(r.Timeouts) == 0
}

// ListingStore is a Store that can list its keys: Dispatcher.StuckInstances
// needs it. kvstore and memstore are ListingStores.
type ListingStore interface {
	Store
	// ListKeys yields the keys that start with prefix (all if empty), in
	// no particular order, and an error if the listing fails.
	ListKeys(ctx context.Context, prefix string) iter.Seq2[string, error]
}

// StuckInstances lists the stuck instances of saga sagaName (of every saga
// if empty): running instances of a saga with CheckLiveness that, after
// their last step, have no pending timeout and expect no message
// (Context.Expect). Nothing will move them on; an operator completes or
// feeds them. Data is as stored (see Instance).
//
// It reads every record of the saga (or of the store), one at a time. A
// Store that cannot list its keys (not a ListingStore) yields an error
// matching errors.ErrUnsupported.
func (d *Dispatcher) StuckInstances(ctx context.Context, sagaName string) iter.Seq2[*Instance, error] {
	return func(yield func(*Instance, error) bool) {
		ls, ok := d.store.(ListingStore)
		if !ok {
			yield(nil, fmt.Errorf("saga: listing stuck instances: the store (%T) cannot list its keys: %w", d.store, errors.ErrUnsupported))
			return
		}
		prefix := ""
		if sagaName != "" {
			prefix = sagaName + "."
		}
		for key, err := range ls.ListKeys(ctx, prefix) {
			if err != nil {
				if !yield(nil, err) {
					return
				}
				continue
			}
			name, enc, ok := strings.Cut(key, ".")
			id, derr := base64.RawURLEncoding.DecodeString(enc)
			if !ok || derr != nil || strings.HasPrefix(key, "=") {
				continue // not a saga record (see CallKeyPrefix)
			}
			rec, _, err := d.load(ctx, key)
			if errors.Is(err, ErrNotFound) {
				continue // completed and expired meanwhile
			}
			if err != nil {
				if !yield(nil, err) {
					return
				}
				continue
			}
			if !stuck(rec) {
				continue
			}
			inst := &Instance{Saga: name, ID: string(id), Data: rec.Data(), Started: rec.Started, Updated: rec.Updated,
				Timeouts: []PendingTimeout{}, DataVersion: rec.DataVersion()}
			if !yield(inst, nil) {
				return
			}
		}
	}
}
