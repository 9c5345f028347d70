package saga

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	recordfmt "github.com/jetsaga/jetsaga/internal/record"
	"github.com/jetsaga/jetsaga/transport"
)

// The step stage: for each saga a message goes to, load the instance's
// record, run the handler, and commit data, inbox and outbox in one
// conditional write (commit.go), again on fresh state after a conflict,
// and again after a handler's transient error (immediate retries). The
// record cache may supply the record (see commit.go); a step that started
// from it and comes to any decision other than a commit runs again on a
// fresh load. With a UnitStore, each attempt runs in a unit of work of
// the store (unit.go), always on a record loaded in it.

// A stepped delivery is what the step stage made of it, for the settle
// stage (settle.go) to act on.
type stepped struct {
	outcome Outcome
	// err: the step failed, or, with outcome EffectsPending, committed
	// with effects that must wait.
	err error
	// deadLetter, if set, is the reason to dead-letter the message at
	// once: it was not run.
	deadLetter string
	identity   string   // the message's (see propOrigin)
	done       []string // of a failed step: the instances it is committed on (see propDone)
	tries      int      // of a failed step: its runs on this delivery
	// pending are the instances whose committed effects must wait: a
	// flush message each retries them; pendingErr says why they wait.
	pending    []*target
	pendingErr error
	// inInbox: every instance the message went to has it in its inbox.
	inInbox   bool
	conflicts int
}

// runTargets runs the message's step on each saga it goes to, retrying a
// transient failure at once (RetryPolicy.Immediate times), until one
// fails. The outcome is the most telling of the steps': Handled over
// NotFoundHandled over Dropped or Skipped over Duplicate, and
// EffectsPending over all when a committed step's effects must wait.
func (d *Dispatcher) runTargets(ctx context.Context, del *transport.Delivery, ts []*target, info *StepInfo) stepped {
	st := stepped{
		outcome:  Duplicate,
		identity: cmp.Or(del.Properties[propOrigin], del.MessageID, anonymousIdentity(d.queueName, del.Message)),
		inInbox:  true,
	}
	done := doneList(del.Properties[propDone]) // instances an earlier delivery committed it on
	for _, t := range ts {
		info.Saga, info.ID = t.rt.Name(), t.id
		o, tries, conflicts, err := d.stepTarget(ctx, del, t, st.identity, done, info)
		st.conflicts += conflicts
		// The list tells a later delivery which instances a failed one
		// committed on: with one target there is no failure after a commit.
		if err == nil && len(ts) > 1 && (o == Handled || o == Duplicate || o == Skipped || o == EffectsPending) && !slices.Contains(done, t.doneKey()) {
			done = append(done, t.doneKey())
		}
		if o == EffectsPending {
			st.pending = append(st.pending, t)
			st.pendingErr = errors.Join(st.pendingErr, err)
			st.outcome = EffectsPending
			continue
		}
		if err != nil {
			// A copy, so that done, appended to above, does not escape
			// to the heap.
			st.outcome, st.err, st.tries, st.done = "", err, tries, slices.Clone(done)
			return st
		}
		if o != Handled && o != Duplicate && o != Skipped {
			st.inInbox = false
		}
		if st.outcome != EffectsPending && st.outcome != Handled && (o == Handled || o == NotFoundHandled ||
			(o == Dropped || o == Skipped) && st.outcome == Duplicate) {
			st.outcome = o
		}
	}
	if len(st.pending) > 0 {
		st.err = fmt.Errorf("%w: %w", ErrEffectsPending, st.pendingErr)
	}
	return st
}

// stepTarget runs the message's step on the saga t, again at once after
// a transient failure (RetryPolicy.Immediate times), unless an earlier
// delivery committed it there (done). It returns the outcome, how many
// times the step ran and the conflicts it met.
func (d *Dispatcher) stepTarget(ctx context.Context, del *transport.Delivery, t *target, identity string, done []string, info *StepInfo) (Outcome, int, int, error) {
	var o Outcome
	var err error
	tries, conflicts := 0, 0
	for t.err != nil || len(done) == 0 || !slices.Contains(done, t.doneKey()) {
		tries++
		if tries > 1 && t.err != nil && !errors.Is(t.err, ErrPermanent) {
			d.correlate(ctx, del, t) // a Finder's transient failure
			info.ID = t.id
		}
		if t.err != nil {
			o, err = "", t.err
		} else {
			var n int
			o, n, err = d.step(ctx, t, del, identity)
			conflicts += n
			if errors.Is(err, errIndexMoved) && !t.lookUp {
				// Correlated by an entry whose instance does not hold
				// the value: look it up in full, not counted as a try.
				t.lookUp, tries = true, tries-1
				d.correlate(ctx, del, t)
				info.ID = t.id
				continue
			}
		}
		if err == nil || o == EffectsPending || errors.Is(err, ErrPermanent) || errors.Is(err, ErrDataVersionAhead) ||
			unavailable(err) || tries > d.cfg.retry.Immediate {
			break
		}
	}
	if tries == 0 {
		o = Duplicate // committed by an earlier delivery, whose retry this is
	}
	return o, tries, conflicts, err
}

// step runs one saga's handler for a message and commits the result,
// running it again on fresh state after a conflict. It returns the
// outcome and the number of conflicts met.
func (d *Dispatcher) step(ctx context.Context, t *target, del *transport.Delivery, identity string) (Outcome, int, error) {
	key := storeKey(t.rt.Name(), t.id)
	waits := 0
	// The first attempt may start from a record that is no longer the
	// one stored (see records); an attempt again starts from the store.
	first := true
	us, inUnits := d.store.(UnitStore)
	for conflicts := 0; ; {
		var o Outcome
		var err error
		if inUnits {
			o, err = d.attemptInUnit(ctx, us, t, key, identity, del, waits < outboxWaits)
		} else {
			o, err = d.attempt(ctx, nil, t, key, identity, del, waits < outboxWaits, first)
		}
		first = false
		if errors.Is(err, errStale) {
			continue
		}
		if errors.Is(err, errOutboxBusy) {
			waits++
			if err := sleep(ctx, time.Millisecond<<waits); err != nil {
				return "", conflicts, err
			}
			continue
		}
		if !errors.Is(err, ErrConflict) {
			return o, conflicts, err
		}
		if conflicts++; conflicts > d.cfg.conflicts {
			return "", conflicts, fmt.Errorf("saga %s/%s: gave up after %d conflicts: %w", t.rt.Name(), t.id, conflicts, err)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(d):
		return nil
	}
}

// A step that finds the outbox of a step committed moments ago waits a
// little (1, 2, 4, 8, 16 ms) for its owner to finish carrying it out,
// rather than carrying it out again: a message a step sends to its own
// queue is often received before the sending step has cleared its outbox.
// After that, or for an older outbox (its owner likely crashed), it takes
// the outbox over.
const (
	outboxWaits = 5
	outboxGrace = 5 * time.Second
)

var errOutboxBusy = errors.New("saga: outbox being carried out")

// errStale asks for a step started from a record that may be stale to be
// run again from the store: it came to a decision other than a commit,
// which only a commit (conditional on the revision) would have checked.
var errStale = errors.New("saga: record may be stale; loading it again")

// attempt is one load → handle → commit → carry out effects round. It
// returns EffectsPending with the error when the message's change is
// committed but its effects could not all be carried out.
//
// With mayBeStale, it may start from a record that is no longer the one
// stored (see records): then every decision but a commit is made again on
// a record loaded from the store. With a unit u (see attemptInUnit), ctx
// carries it, and the commit of the record commits u before the effects
// are carried out.
func (d *Dispatcher) attempt(ctx context.Context, u *stepUnit, t *target, key, identity string, del *transport.Delivery, patient, mayBeStale bool) (Outcome, error) {
	now := d.cfg.now()
	rec, rev, stale, err := d.records.load(ctx, key, mayBeStale)
	var tombstone *record
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return "", err
	default:
		// Effects a step committed but did not carry out go first: the
		// next commit would overwrite them.
		if len(rec.Outbox) > 0 {
			if stale {
				return fresh(stale, "", nil)
			}
			var o Outcome
			if rev, o, err = d.carryOutEarlier(ctx, key, identity, rec, rev, now, patient); err != nil {
				return o, err
			}
		}
		if rec.Seen(identity) {
			return fresh(stale, Duplicate, nil)
		}
		if !t.in.check.heldBy(rec) {
			return fresh(stale, "", errIndexMoved)
		}
		if rec.Completed {
			if stale {
				return fresh(stale, "", nil)
			}
			tombstone = rec
			rec = rec.InboxOnly() // a finished instance: as if not found
		} else if v := rec.DataVersion(); v > t.rt.dataVersion() {
			// Written by a newer worker: never written by this one.
			return fresh(stale, "", fmt.Errorf("%w: saga %s/%s: version %d, this worker's definition knows %d",
				ErrDataVersionAhead, t.rt.Name(), t.id, v, t.rt.dataVersion()))
		}
	}
	if rec == nil && t.in.check != nil {
		return "", errIndexMoved // a claim, a stale entry: look it up
	}
	isNew := rec == nil || rec.Started.IsZero()
	if isNew && stale {
		return fresh(stale, "", nil)
	}
	if isNew && t.kind != routeTimeout && t.kind != routeStart {
		return d.notFound(ctx, t, key, identity, del, tombstone)
	}
	if isNew && t.kind == routeTimeout {
		return Dropped, nil
	}
	if isNew {
		if rec == nil {
			rec = &record{}
		}
		rec.Started = now
		rec.Originator = &address{ReplyTo: del.ReplyTo, CorrelationID: cmp.Or(del.CorrelationID, del.MessageID)}
	}
	var token string
	var te timeoutEntry
	if t.kind == routeTimeout {
		var ok bool
		if token, te, ok = takeTimeout(rec, del); !ok {
			return fresh(stale, Dropped, nil)
		}
	}
	s := &stepState{ctx: ctx, d: d, rt: t.rt, sagaName: t.rt.Name(), id: t.id, key: key, identity: identity, in: del.Message,
		rec: rec, isNew: isNew, now: now, codec: d.cfg.codec, timeout: token, timeoutDue: te.At, occurrence: te.Occurrence,
		mayBeStale: stale}
	if u != nil {
		s.outer = u.outer
	}
	return d.handleAndCommit(ctx, u, t, del, s, te, rev, stale)
}

// handleAndCommit runs the handler on the step's state s (or, for a
// timeout te that its catch-up policy skips, no handler), commits the
// record loaded at rev, and carries out the effects committed. With
// stale, every decision but a commit is made again (see fresh). With a
// unit u, the record's commit commits u, and the effects are carried out
// after it.
func (d *Dispatcher) handleAndCommit(ctx context.Context, u *stepUnit, t *target, del *transport.Delivery, s *stepState, te timeoutEntry, rev uint64, stale bool) (Outcome, error) {
	o, err := d.handleAndCommitCalls(ctx, u, t, del, s, te, rev, stale)
	// Not deferred: a run that dies (a panic unwinding it, as a crash in
	// sagatest) leaves its calls' outcomes as a dead process would.
	d.persistCalls(s, s.committed)
	return o, err
}

// handleAndCommitCalls is handleAndCommit but for the calls' outcomes.
func (d *Dispatcher) handleAndCommitCalls(ctx context.Context, u *stepUnit, t *target, del *transport.Delivery, s *stepState, te timeoutEntry, rev uint64, stale bool) (Outcome, error) {
	rec, key, identity, now, token := s.rec, s.key, s.identity, s.now, s.timeout
	typ := del.Properties[propType]
	var late *LateTimeout
	if t.kind == routeTimeout {
		if te.Recurring() {
			// The next occurrence first: pending while the handler
			// runs, committed with its step, and seen by the catch-up
			// policy (a coalesced occurrence is skipped if the next
			// one is overdue too).
			if err := s.scheduleNext(token, te); err != nil {
				return fresh(stale, "", err)
			}
		}
		late = s.catchUp(t.rt.catchUpOf(typ), token, te)
	}
	if late != nil && late.Skipped {
		rec.Updated = now
	} else {
		if err := callHandler(ctx, t.rt, s, typ, t.m); err != nil {
			return fresh(stale, "", &HandlerError{Saga: t.rt.Name(), ID: t.id, Message: typ, Err: err})
		}
		if s.reload {
			return "", errStale // a Call on a cached record (see Call)
		}
	}
	if err := rec.Remember(identity, now, d.inboxRetention()); err != nil {
		return fresh(stale, "", fmt.Errorf("saga %s/%s: %d messages committed within the inbox retention (%v): %w",
			t.rt.Name(), t.id, rec.InboxLen(), d.inboxRetention(), err))
	}
	if rec.Completed {
		s.complete()
	}
	rev, err := d.records.commit(ctx, key, rec, rev)
	if err != nil {
		if errors.Is(err, ErrConflict) {
			return "", err
		}
		return fresh(stale, "", err)
	}
	if err := u.commit(ctx); err != nil {
		return "", err
	}
	s.committed = true
	if late != nil {
		d.reportLate(ctx, *late)
	}
	if err := d.carryOutCommitted(ctx, key, rec, rev); err != nil {
		return EffectsPending, err
	}
	if late != nil && late.Skipped {
		return Skipped, nil
	}
	return Handled, nil
}

// fresh returns o and err, the way out of every decision of a step but
// a commit, unless the step started from a record that may be stale:
// then errStale, to make the decision again on a fresh load.
func fresh(stale bool, o Outcome, err error) (Outcome, error) {
	if stale {
		return "", errStale
	}
	return o, err
}

// carryOutEarlier carries out the effects an earlier step committed and
// did not carry out, before this step may commit over them, and returns
// the record's revision after. An error ends the attempt with the
// outcome returned: EffectsPending if the earlier step was this
// message's own.
func (d *Dispatcher) carryOutEarlier(ctx context.Context, key, identity string, rec *record, rev uint64, now time.Time, patient bool) (uint64, Outcome, error) {
	if !rec.HasSends() {
		// Timeouts to schedule or cancel only: carrying them out again is
		// harmless at any time (see carryOutInMemory), and this step's
		// commit, if it makes one, stores the record without them.
		if err := d.carryOutInMemory(ctx, key, rec); err != nil {
			if rec.Seen(identity) {
				return rev, EffectsPending, err // this message's own step
			}
			return rev, "", err
		}
		return rev, "", nil
	}
	if patient && now.Sub(rec.Updated) < outboxGrace {
		return rev, "", errOutboxBusy
	}
	rev, err := d.carryOutAndClear(ctx, key, rec, rev)
	if err != nil {
		if rec.Seen(identity) && !errors.Is(err, ErrConflict) {
			return rev, EffectsPending, err // this message's own step
		}
		return rev, "", err
	}
	return rev, "", nil
}

// takeTimeout removes from rec the pending timeout del delivers, and
// returns its token and entry; ok is false if the instance no longer
// waits for this message: the timeout was cancelled, rescheduled or
// already handled, or del was scheduled before a re-plan or a move to
// another engine whose cancel came too late.
func takeTimeout(rec *record, del *transport.Delivery) (token string, te timeoutEntry, ok bool) {
	token = del.Properties[propToken]
	if te, ok = rec.Timeouts[token]; !ok {
		return "", te, false
	}
	if te.ID != "" && te.ID != cmp.Or(del.Properties[propMessageID], del.MessageID) {
		return "", te, false
	}
	delete(rec.Timeouts, token)
	return token, te, true
}

// carryOutCommitted carries out the effects of the step just committed
// at rev.
func (d *Dispatcher) carryOutCommitted(ctx context.Context, key string, rec *record, rev uint64) error {
	switch {
	case len(rec.Outbox) == 0:
	case rec.HasSends() || !d.mayKeepOutbox:
		if _, err := d.carryOutAndClear(ctx, key, rec, rev); err != nil && !errors.Is(err, ErrConflict) {
			return err
		}
	default:
		// Timeouts only: the outbox may stay in the stored record until
		// the next commit on the instance (see carryOutInMemory), if that
		// step starts from this record without it.
		if err := d.carryOutInMemory(ctx, key, rec); err != nil {
			return err
		}
		if !d.records.keepOutbox(key, rev, rec) {
			if _, err := d.records.commit(ctx, key, rec, rev); err != nil && !errors.Is(err, ErrConflict) {
				return err
			}
		}
	}
	return nil
}

func callHandler(ctx context.Context, rt sagaRuntime, s *stepState, typ string, m any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v\n%s", ErrPanic, p, debug.Stack())
		}
	}()
	return rt.run(ctx, s, typ, m)
}

// A message several sagas handle may be committed on some of its
// instances and fail on another. Its delayed retry (or version wait) is a
// new message, which may come after the committed instances' inboxes
// have forgotten it (the retry policy's backoff against the inbox
// retention): it lists them (propDone), and is not run on them again.

// doneKey names an instance in propDone: the digest of its store key.
func (t *target) doneKey() string {
	if t.doneID != t.id || t.done == "" {
		t.done, t.doneID = recordfmt.InboxDigest(storeKey(t.rt.Name(), t.id)), t.id
	}
	return t.done
}

// doneList reads propDone.
func doneList(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// setDone writes done to m's propDone, as many as fit in a property
// (maxPropValue bytes): the rest rely on their inboxes.
func setDone(m *transport.Message, done []string) {
	if len(done) == 0 {
		return
	}
	var b strings.Builder
	for _, k := range done {
		if b.Len()+len(k)+1 > maxPropValue {
			break
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
	}
	m.Properties[propDone] = b.String()
}

// maxPropValue is the longest property value the transport takes.
const maxPropValue = 4096
