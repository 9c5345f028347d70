package saga

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
)

// Moving pending timeouts between engines: after a change of the
// timeout.Router's routes, timeouts already scheduled stay on the engine
// that holds them; MigrateTimeouts moves them, one at a time, each as a
// step on its instance, and DrainReport says what is left on an engine.

// ErrUnknownEngine is returned by MigrateTimeouts and DrainReport for an
// engine the dispatcher's timeout scheduler does not have (it must be a
// timeout.Router with that engine as Default or in a route).
var ErrUnknownEngine = errors.New("saga: unknown timeout engine")

// MigrateOutcome is what a migration did to one timeout.
type MigrateOutcome string

// Outcomes of a timeout's migration.
const (
	// MigrateMoved: the instance now waits for the timeout on the new
	// engine, at the same due time and under the same handle; the copy on
	// the old engine is cancelled, or, if it fired first, dropped when it
	// arrives (its ID is no longer the timeout's). Also the outcome for a
	// timeout an earlier, interrupted migration moved.
	MigrateMoved MigrateOutcome = "moved"
	// MigrateFired: the timeout fired on its engine before it could be
	// moved; it has been or will be handled as usual. Nothing changed.
	// Also the outcome for the old engine's copy of a timeout that an
	// earlier migration moved and that has fired on the new engine since
	// (the old copy is listed until it is gone: one due within the old
	// engine's cancel margin, say, stays until it activates).
	MigrateFired MigrateOutcome = "fired"
	// MigrateCancelled: the instance no longer waits for the timeout (its
	// saga cancelled or rescheduled it, or completed) — a copy left on
	// the engine is dropped if it fires. Nothing changed.
	MigrateCancelled MigrateOutcome = "cancelled"
	// MigrateFailed: the timeout was left as it was, on its engine; the
	// error says why. Migrating again retries it.
	MigrateFailed MigrateOutcome = "failed"
)

// Migrated reports what a migration did to one pending timeout.
type Migrated struct {
	Saga, ID string
	Handle   TimeoutHandle
	Type     string    // empty if the instance no longer has the timeout
	At       time.Time // the due time, the same on both engines
	// From is the timeout's ref on the engine it was on; To its ref on the
	// new engine, once scheduled there (empty while its scheduling is
	// pending: the error then matches ErrEffectsPending).
	From, To timeout.Ref
	Outcome  MigrateOutcome
}

// MigrateOption qualifies a migration.
type MigrateOption func(*migrateConfig)

type migrateConfig struct{ from string }

// MigrateFrom moves only the timeouts on the engine named from. Default:
// those on every engine but the target.
func MigrateFrom(engine string) MigrateOption { return func(c *migrateConfig) { c.from = engine } }

// MigrateTimeouts moves the pending timeouts of saga sagaName to the
// engine named to, one at a time: each as a step on its instance (it never
// races the instance's handlers, and is run again on fresh state after a
// conflict), at the same due time, under the same handle. The timeouts are
// found through the engines' listings (ScheduledTimeouts); every timeout
// not on to (or, with MigrateFrom, on that engine) is moved. The engine
// to must be in the dispatcher's timeout.Router (WithTimeouts), and so must
// the engines the timeouts are on, which must implement timeout.Getter
// (Transport and Temporal do) unless the record keeps the message (a
// timeout requested by a rule, or moved before). Change the Router's
// routes first, so that new timeouts go to the new engine too.
//
// The iterator yields one Migrated per listed timeout, as its step ends,
// with a definite outcome: moved, fired (before it could be moved),
// cancelled (the instance no longer waits for it), or failed with the
// error (the timeout is left as it was). An error matching
// ErrEffectsPending says the move was committed but carrying it out on an
// engine failed; it is retried as a step's pending effects are, and the
// outcome is MigrateMoved. An error not about one timeout (an engine's
// listing failed) comes with a zero Migrated; the migration goes on if
// the caller continues. Stopping the iteration stops the migration after
// the current timeout. Moving again is safe: what was moved is skipped.
//
// A timeout is never delivered twice and never lost, whatever the point
// at which the process dies. A move is one step on the instance: it loads
// the record, reads the timeout's message (from the record or the old
// engine), and commits the record with a new ID for the timeout, the move
// in its outbox: schedule on to, then cancel on the old engine. That
// commit is the switch point:
//
//   - dies before the commit: nothing changed. The timeout is on the old
//     engine as before and fires there; migrating again moves it.
//   - dies after the commit, before the schedule on the new engine: the
//     instance waits for the new ID, the outbox holds the schedule. The
//     old copy, if it fires, is dropped (its ID is not the timeout's), but
//     the step that drops it first carries out the outbox; so does any
//     step on the instance, a flush, or migrating again: the timeout is
//     scheduled on to, idempotently (same ID), at its due time, and fires
//     there once.
//   - dies after the schedule, before the cancel on the old engine: both
//     engines hold a copy; only the new one has the timeout's ID, so the
//     old one is dropped if it fires; the outbox's cancel is carried out
//     as above.
//   - dies after the cancel, before the outbox is cleared from the
//     record: carrying the outbox out again changes nothing (Schedule is
//     idempotent on the ID, Cancel of a cancelled timeout reports
//     ErrNotFound).
//
// A timeout that fires on the old engine while it is being moved is
// handled once: if its step commits first, the move finds the timeout no
// longer pending (MigrateFired); if the move commits first, the old copy is
// dropped and the new engine delivers it (at once, if it is past due).
func (d *Dispatcher) MigrateTimeouts(ctx context.Context, sagaName, to string, opts ...MigrateOption) iter.Seq2[Migrated, error] {
	var cfg migrateConfig
	for _, o := range opts {
		o(&cfg)
	}
	return func(yield func(Migrated, error) bool) {
		if err := d.checkEngine(to); err != nil {
			yield(Migrated{}, err)
			return
		}
		if cfg.from != "" {
			if err := d.checkEngine(cfg.from); err != nil {
				yield(Migrated{}, err)
				return
			}
		}
		var todo []listedTimeout
		for p, err := range d.listedTimeouts(ctx, sagaName) {
			if err != nil {
				if !yield(Migrated{}, err) {
					return
				}
				continue
			}
			if !p.movable() {
				continue
			}
			if eng := p.st.Ref.Engine(); eng != to && (cfg.from == "" || eng == cfg.from) {
				todo = append(todo, p)
			}
		}
		slices.SortFunc(todo, func(a, b listedTimeout) int {
			return cmp.Or(cmp.Compare(a.st.ID, b.st.ID), cmp.Compare(a.st.Handle, b.st.Handle))
		})
		for _, p := range todo {
			if ctx.Err() != nil {
				yield(Migrated{}, context.Cause(ctx))
				return
			}
			if !yield(d.migrateOne(ctx, p, to)) {
				return
			}
		}
	}
}

// checkEngine returns ErrUnknownEngine unless the dispatcher's scheduler
// has an engine named name.
func (d *Dispatcher) checkEngine(name string) error {
	r, ok := d.cfg.timeouts.(interface{ HasEngine(string) bool })
	if !ok {
		return fmt.Errorf("%w: %q: the dispatcher's timeout scheduler (%T) is not a timeout.Router", ErrUnknownEngine, name, d.cfg.timeouts)
	}
	if !r.HasEngine(name) {
		return fmt.Errorf("%w: %q is not an engine of the dispatcher's timeout.Router", ErrUnknownEngine, name)
	}
	return nil
}

// listedTimeout is a saga timeout an engine lists, with its ID on the
// engine (its message's MessageID).
type listedTimeout struct {
	st       ScheduledTimeout
	engineID string
}

// movable reports whether a migration or a drain report deals with the
// listed timeout: one with a handle, and not activated early (it fires
// within its lead).
func (p listedTimeout) movable() bool { return p.st.Handle != "" && !p.st.Activating }

// listedTimeouts lists the saga timeouts of sagaName on every engine, as
// ScheduledTimeouts does, with their IDs on the engines.
func (d *Dispatcher) listedTimeouts(ctx context.Context, sagaName string) iter.Seq2[listedTimeout, error] {
	return func(yield func(listedTimeout, error) bool) {
		if _, err := d.open(ctx); err != nil {
			yield(listedTimeout{}, err)
			return
		}
		for p, err := range timeout.List(ctx, d.cfg.timeouts, timeout.Filter{Queue: d.queueName, Saga: sagaName}) {
			if err != nil {
				if !yield(listedTimeout{}, err) {
					return
				}
				continue
			}
			if p.Saga == "" || p.Properties[propType] == flushType {
				continue // not a saga timeout
			}
			st := ScheduledTimeout{Saga: p.Saga, ID: p.Instance, Type: p.Properties[propType], At: p.At, Ref: p.Ref, Seq: p.Seq,
				Handle: TimeoutHandle(p.Properties[propToken]), Activating: p.Activating}
			scheduledPlan(&st, p)
			if !yield(listedTimeout{st: st, engineID: p.ID}, nil) {
				return
			}
		}
	}
}

// migrateOne moves one listed timeout to the engine to, as a step on its
// instance.
func (d *Dispatcher) migrateOne(ctx context.Context, p listedTimeout, to string) (Migrated, error) {
	sagaName, id, tok := p.st.Saga, p.st.ID, string(p.st.Handle)
	res := Migrated{Saga: sagaName, ID: id, Handle: p.st.Handle, Type: p.st.Type, At: p.st.At, From: p.st.Ref, Outcome: MigrateFailed}
	if err := validateID(id); err != nil {
		return res, fmt.Errorf("%w: %s/%.64q: %w", ErrNotFound, sagaName, id, err)
	}
	key := storeKey(sagaName, id)
	u, err := d.update(ctx, update{
		saga: sagaName, id: id, identity: "migrate:" + strconv.FormatInt(d.cfg.now().UnixNano(), 10),
		failed: "timeout " + tok + " not moved",
		change: func(rec *record) (bool, error) { return d.moveTimeout(ctx, rec, key, p, to, &res) },
		pending: func() string {
			return "timeout " + tok + " moved to " + to + " in its state; carrying the move out on the engines failed"
		},
	})
	switch {
	case errors.Is(err, ErrNotFound) && u.rec == nil:
		res.Outcome = MigrateCancelled // the instance is gone
		return res, nil
	case !u.committed:
		return res, err
	}
	// Committed: the timeout is the new ID's, on to.
	res.Outcome = MigrateMoved
	if err == nil {
		res.To = u.rec.Timeouts[tok].Ref
	}
	return res, err
}

// moveTimeout changes rec to move the listed timeout p to the engine to,
// and reports whether it did; if not, res says why.
func (d *Dispatcher) moveTimeout(ctx context.Context, rec *record, key string, p listedTimeout, to string, res *Migrated) (bool, error) {
	sagaName, id, tok := p.st.Saga, p.st.ID, string(p.st.Handle)
	te, ok := rec.Timeouts[tok]
	if !ok || rec.Completed {
		res.Outcome = MigrateCancelled
		// Handled: this copy, or the one an earlier migration moved
		// it to (the listed copy is then that move's stale one, left
		// to activate within the cancel margin, say).
		if rec.Seen(p.engineID) || rec.Seen(tok) || rec.Seen(migratedID(key, tok, p.engineID, to)) {
			res.Outcome = MigrateFired
		}
		return false, nil
	}
	res.Type, res.At, res.From = te.Type, te.At, te.Ref
	if te.Ref.Engine() == to {
		res.From, res.To, res.Outcome = p.st.Ref, te.Ref, MigrateMoved // by an earlier migration
		return false, nil
	}
	if te.Ref == "" {
		return false, fmt.Errorf("saga %s/%s: timeout %s not moved: it has no ref after its outbox was carried out", sagaName, id, tok)
	}
	msg, err := d.timeoutMessage(ctx, te, tok)
	if errors.Is(err, timeout.ErrAlreadyFired) {
		res.Outcome = MigrateFired
		return false, nil
	}
	if errors.Is(err, timeout.ErrNotFound) {
		return false, fmt.Errorf("saga %s/%s: timeout %s not moved: its engine no longer holds it and it did not fire "+
			"(cancelled on the engine only?); the instance still waits for it: %w", sagaName, id, tok, err)
	}
	if err != nil {
		return false, fmt.Errorf("saga %s/%s: timeout %s not moved: %w", sagaName, id, tok, err)
	}
	// A new ID: the engines deduplicate a schedule by ID, and a copy
	// that fires from the old engine must be told apart (and dropped).
	// The old copy's ID is cmp.Or(te.ID, tok): a timeout's first ID is
	// its token.
	msg.ID = migratedID(key, tok, cmp.Or(te.ID, tok), to)
	old := te.Ref
	te.ID, te.Ref, te.Msg = msg.ID, "", msg
	rec.Timeouts[tok] = te
	rec.Outbox = append(rec.Outbox,
		effect{Kind: effectSchedule, Queue: d.queueName, Msg: msg, At: te.At, Token: tok, ID: msg.ID, Engine: to},
		effect{Kind: effectCancel, Ref: old, Token: tok})
	return true, nil
}

// migratedID is the ID a migration to the engine to gives the timeout
// tok of record key whose copy on its engine has the ID from.
func migratedID(key, tok, from, to string) string {
	return effectID(key, "migrate\x00"+tok+"\x00"+from+"\x00"+to, 0)
}

// timeoutMessage returns the message of a pending timeout: the one its
// record keeps (a timeout requested by a rule, or moved before), or the
// one its engine holds.
func (d *Dispatcher) timeoutMessage(ctx context.Context, te timeoutEntry, tok string) (*envelope, error) {
	if te.Msg != nil {
		m := *te.Msg
		m.Properties = maps.Clone(te.Msg.Properties)
		return &m, nil
	}
	t, err := timeout.Get(ctx, d.cfg.timeouts, te.Ref)
	if err != nil {
		return nil, err
	}
	m := t.Message
	if m == nil || m.Properties[propToken] != tok {
		return nil, fmt.Errorf("the message %s holds is not the timeout's", te.Ref)
	}
	props := maps.Clone(m.Properties)
	typ := props[propType]
	// The engines set these again when they schedule it.
	delete(props, propType)
	delete(props, timeout.PropertyTimeout)
	delete(props, timeout.PropertyDue)
	return &envelope{
		ID: m.MessageID, Type: typ, Body: m.Body, ContentType: m.ContentType,
		CorrelationID: m.CorrelationID, ReplyTo: m.ReplyTo, SessionID: m.SessionID, PartitionKey: m.PartitionKey, Properties: props,
	}, nil
}

// DrainReport is what an engine still holds of a saga type's timeouts.
type DrainReport struct {
	Saga, Engine string
	// Pending are the timeouts the instances wait for on the engine, by
	// due time.
	Pending []ScheduledTimeout
	// Stale are copies the engine holds that no instance waits for: moved
	// or cancelled timeouts whose cancel on this engine has not been
	// carried out yet (or not yet shown by its listing: Temporal's
	// visibility store lags by a second or so). They are dropped if they
	// fire. By due time.
	Stale []ScheduledTimeout
	// ByType counts Pending by timeout type.
	ByType map[string]int
}

// Drained reports whether no instance waits for a timeout on the engine.
func (r DrainReport) Drained() bool { return len(r.Pending) == 0 }

// DrainReport lists what the engine named engine still holds of saga
// sagaName's timeouts (all sagas if empty): after MigrateTimeouts moved
// them elsewhere, an engine is drained when Pending is empty, and may be
// removed from the Router once Stale is empty too. Each listed timeout is
// checked against its instance's record. The error is the listing's: the
// report is then incomplete.
func (d *Dispatcher) DrainReport(ctx context.Context, sagaName, engine string) (DrainReport, error) {
	r := DrainReport{Saga: sagaName, Engine: engine, ByType: map[string]int{}}
	if err := d.checkEngine(engine); err != nil {
		return r, err
	}
	var errs []error
	for p, err := range d.listedTimeouts(ctx, sagaName) {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !p.movable() || p.st.Ref.Engine() != engine {
			continue
		}
		waits, err := d.waitsFor(ctx, p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if waits {
			r.Pending = append(r.Pending, p.st)
			r.ByType[p.st.Type]++
		} else {
			r.Stale = append(r.Stale, p.st)
		}
	}
	byDue := func(a, b ScheduledTimeout) int { return a.At.Compare(b.At) }
	slices.SortStableFunc(r.Pending, byDue)
	slices.SortStableFunc(r.Stale, byDue)
	return r, errors.Join(errs...)
}

// waitsFor reports whether the listed timeout is one its instance waits
// for: the instance has it, under the ID the engine holds.
func (d *Dispatcher) waitsFor(ctx context.Context, p listedTimeout) (bool, error) {
	if validateID(p.st.ID) != nil {
		return false, nil
	}
	rec, _, err := d.load(ctx, storeKey(p.st.Saga, p.st.ID))
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	te, ok := rec.Timeouts[string(p.st.Handle)]
	return ok && !rec.Completed && cmp.Or(te.ID, string(p.st.Handle)) == p.engineID, nil
}
