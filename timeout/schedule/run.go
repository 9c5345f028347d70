package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jetsaga/jetsaga/internal/statelog"
	"github.com/jetsaga/jetsaga/transport"
)

// maxPerTick bounds the occurrences one tick sends (or skips) before it
// writes its progress and goes on with a new tick, so that a long catch-up
// is resumed, not restarted, after a crash.
const maxPerTick = 256

// runConcurrency is how many ticks a Run handles at once: a burst of
// schedules planned together, or ticks that came early from a timeout
// engine and wait for their time.
const runConcurrency = 256

// Run receives the scheduler's pending occurrences as they fall due and
// sends them, until ctx ends; then it returns nil. Run it in every process
// that should send occurrences (one is enough; more take over from each
// other): while none runs, pending occurrences wait, and the catch-up
// policy decides what is sent when one runs again.
//
// A receive that fails (the server away) is retried every second, logged
// once when it starts failing and once when it works again. A connection
// closed for good ends Run with an error that matches
// transport.ErrClosed, logged at Error: Run never returns nil while ctx
// lives.
func (s *Scheduler) Run(ctx context.Context) error {
	q, err := s.queue(ctx)
	if err != nil {
		return err
	}
	// Ticks of different schedules are independent (a schedule has one
	// pending at a time): handle up to runConcurrency at once.
	sem := make(chan struct{}, runConcurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	failing := statelog.Failures{Logger: s.log, What: "schedule: receive", Attrs: []slog.Attr{slog.String("queue", s.queueName)}}
	for {
		ds, err := q.Receive(ctx, runConcurrency)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, transport.ErrClosed) {
			s.log.LogAttrs(ctx, slog.LevelError, "schedule: runner stopped: its connection closed for good",
				slog.String("queue", s.queueName), slog.Any("error", err))
			return fmt.Errorf("schedule: runner of queue %q stopped: %w", s.queueName, err)
		}
		if err != nil {
			failing.Failed(ctx, err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
			continue
		}
		failing.Worked(ctx)
		for _, d := range ds {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				s.handleTick(ctx, d)
			})
		}
	}
}

// handleTick sends the occurrences a tick stands for and plans the next
// one; a stale tick (the record names another) is dropped.
func (s *Scheduler) handleTick(ctx context.Context, d *transport.Delivery) {
	name, tickID := d.Properties[propTickName], d.Properties[propTickID]
	if d.Subject != tickSubject || ValidateName(name) != nil || tickID == "" {
		_ = d.DeadLetter(ctx, "NotATick", "a message on a schedule queue that the scheduler did not write")
		return
	}
	gen, _ := strconv.ParseUint(d.Properties[propTickGen], 10, 64) // 0 (as stale) if absent
	// A tick may come before its time (a timeout engine's): hold it until
	// readAhead before then, and only then read the record, so that a
	// Pause during the hold stops it. (fire holds the rest of the way,
	// and holds a tick that does not carry its time.)
	if at, err := time.Parse(time.RFC3339Nano, d.Properties[propTickFireAt]); err == nil && time.Until(at) > readAhead {
		select {
		case <-ctx.Done():
			_ = d.Abandon(context.WithoutCancel(ctx))
			return
		case <-time.After(time.Until(at) - readAhead):
		}
	}
	wait := 10 * time.Millisecond
	outageWait := 100 * time.Millisecond
	for start := time.Now(); ; {
		err := s.fire(ctx, name, tickID, gen)
		if errors.Is(err, transport.ErrStateConflict) {
			continue
		}
		if errors.Is(err, errRecordBehind) {
			// The tick came before the write of the record that names it
			// (a tick due at once on a timeout engine, written first):
			// wait for the record. If it never comes (the writer died or
			// lost a race), its record still names a tick of its own; drop
			// this one.
			if time.Since(start) < maxRecordWait {
				select {
				case <-ctx.Done():
				case <-time.After(wait):
				}
				wait = min(2*wait, 500*time.Millisecond)
				continue
			}
			err = nil
		}
		if ctx.Err() != nil {
			// Run is stopping: let another Run have the tick at once.
			_ = d.Abandon(context.WithoutCancel(ctx))
			return
		}
		if errors.Is(err, transport.ErrUnavailable) {
			// An outage (the server, the queue's state, a timeout engine):
			// keep the tick, its lock renewed, and try again — giving it
			// back would spend its deliveries until it is dead-lettered.
			s.outageFailed(ctx, err)
			if !holdTick(ctx, d, &outageWait) {
				return
			}
			continue
		}
		s.outageWorked(ctx)
		if err != nil {
			// A failure that may last (a calendar this process lacks, a
			// target that refuses): try again later with a new tick, rather
			// than redeliver this one until it is dead-lettered.
			s.log.LogAttrs(ctx, slog.LevelWarn, "schedule: occurrence not sent; trying again",
				slog.String("schedule", name), slog.Duration("in", retryDelay), slog.Any("error", err))
			if rerr := s.retryLater(ctx, name, tickID); rerr != nil {
				_ = d.Abandon(ctx)
				return
			}
		}
		_ = d.Complete(ctx)
		return
	}
}

// holdTick keeps the tick d through *wait (which it doubles, up to 5 s),
// renewing its lock when half of it is gone. It returns false when d is
// no longer to be handled: ctx ended (d is abandoned for another Run) or
// its lock was lost.
func holdTick(ctx context.Context, d *transport.Delivery, wait *time.Duration) bool {
	deadline := time.Now().Add(*wait)
	*wait = min(2**wait, 5*time.Second)
	lock := max(time.Until(d.LockedUntil()), 0)
	for {
		step := min(time.Until(deadline), max(time.Until(d.LockedUntil())-lock/2, 50*time.Millisecond))
		if step <= 0 {
			return true
		}
		select {
		case <-ctx.Done():
			_ = d.Abandon(context.WithoutCancel(ctx))
			return false
		case <-time.After(step):
		}
		if time.Until(d.LockedUntil()) < lock/2 {
			err := d.RenewLock(ctx)
			if errors.Is(err, transport.ErrLockLost) || errors.Is(err, transport.ErrAlreadySettled) || time.Until(d.LockedUntil()) <= 0 {
				return false // redelivered: another Run (or this one) has it
			}
			if err == nil {
				lock = time.Until(d.LockedUntil())
			}
		}
	}
}

// outageFailed and outageWorked log the ticks' outages once per change of
// state (statelog).
func (s *Scheduler) outageFailed(ctx context.Context, err error) {
	s.outageOn.Store(true)
	s.outageMu.Lock()
	defer s.outageMu.Unlock()
	s.outage.Logger = s.log
	s.outage.Failed(ctx, err)
}

func (s *Scheduler) outageWorked(ctx context.Context) {
	if !s.outageOn.Load() {
		return
	}
	s.outageMu.Lock()
	defer s.outageMu.Unlock()
	s.outageOn.Store(false)
	s.outage.Logger = s.log
	s.outage.Worked(ctx)
}

// readAhead is how long before a tick's time Run reads its record: the
// read's own latency is then mostly over by the time the tick is due.
const readAhead = 50 * time.Millisecond

// errRecordBehind: the tick's record is of a generation before the
// tick's.
var errRecordBehind = errors.New("schedule: record not written yet")

// maxRecordWait bounds how long Run waits for the record of a tick that
// came before it (errRecordBehind): well within MaxLockDuration.
const maxRecordWait = 5 * time.Second

// retryDelay is how long after a failed tick a Run tries again.
const retryDelay = 10 * time.Second

// retryLater replaces the tick tickID of the schedule name, if its record
// still names it, by one retryDelay from now.
func (s *Scheduler) retryLater(ctx context.Context, name, tickID string) error {
	_, err := s.update(ctx, name, func(r *record) (bool, error) {
		if r.TickID != tickID {
			return false, nil // stale anyway
		}
		r.Wake = time.Now().Add(retryDelay)
		r.retry = true
		return true, nil
	})
	return err
}

// fire handles the tick tickID (of generation gen) of the schedule name:
// it counts the planned occurrences that are due as sent (the server
// activated them), sends the due ones that were not planned (a Run was
// down), as the catch-up policy says, plans the occurrences within the
// horizon, and writes the record with its next tick.
func (s *Scheduler) fire(ctx context.Context, name, tickID string, gen uint64) error {
	q, r, rev, err := s.load(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return nil // deleted
	}
	if err != nil {
		return err
	}
	if r.TickID != tickID && r.Gen < gen {
		return errRecordBehind
	}
	if r.TickID != tickID && r.unresolved() && !r.Paused {
		// A tick that a Run died holding after it wrote a plan and
		// before it scheduled its messages (commitGuarded): finish it.
		if err := s.resolve(ctx, r); err != nil {
			return err
		}
		_, err := s.commitOnce(ctx, q, r, rev, true, true)
		return err
	}
	if r.TickID != tickID || r.Paused || r.Ended || r.Next.IsZero() {
		return nil // stale: re-planned, paused, or handled before
	}
	// Never early: hold the tick until its time, by this process's clock
	// (a tick on a timeout engine may come early). Held longer than
	// readAhead, read the record again: a Pause or Delete during the hold
	// must stop what it would do.
	if wait := time.Until(r.Wake); wait > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		if wait > readAhead {
			return s.fire(ctx, name, tickID, gen)
		}
	}
	p, err := s.planner(r)
	if err != nil {
		return err
	}
	now := time.Now()
	// Occurrences intended by a write whose writer did not schedule them
	// (it died, or the target refused): those due by now were not
	// planned, and go to the catch-up policy (their message, should it
	// exist after all, activated, and the target drops the send as a
	// duplicate); the others are scheduled now.
	for i, o := range r.Plan {
		if o.Seq == 0 && o.ID != activatedID && !r.fireAt(o.At).After(now) {
			r.Plan = r.Plan[:i]
			break
		}
	}
	if err := s.resolve(ctx, r); err != nil {
		return err
	}
	if _, err := r.settle(p, now, func(o planned) {
		s.call(ctx, OccurrenceParams{Schedule: r.Name, ID: OccurrenceID(r.Name, o.At), Nominal: o.At},
			func(h Hooks) func(context.Context, OccurrenceParams) { return h.Sent })
	}); err != nil {
		return err
	}
	sent, more, err := s.catchUp(ctx, r, p, now)
	if err != nil {
		return err
	}
	if more {
		r.Wake = now // more are due: the next tick, at once, goes on
	} else if err := s.extend(r, p, now); err != nil {
		return err
	}
	r.guarded = true
	err = s.commit(ctx, q, r, rev)
	if errors.Is(err, transport.ErrStateConflict) && len(sent) > 0 {
		// Someone wrote the record while we sent (a Pause, say): the
		// sends stand, so note them in the record as it is now, lest a
		// Resume count them as skipped by the pause.
		return s.noteSent(ctx, name, sent)
	}
	return err
}

// catchUp sends, as the catch-up policy says, the occurrences that are
// due by now and were not planned (no Run was up to plan them, or the
// target refused them): the pending one and those after it, up to
// maxPerTick (more reports that more are due). It moves Next to the first
// not due.
func (s *Scheduler) catchUp(ctx context.Context, r *record, p *planner, now time.Time) (sent []sentOccurrence, more bool, err error) {
	if len(r.Plan) > 0 || r.Ended || r.Next.IsZero() || r.fireAt(r.Next).After(now) {
		return nil, false, nil
	}
	var due []time.Time
	t := r.Next
	for len(due) < maxPerTick && !r.fireAt(t).After(now) && (r.End.IsZero() || !t.After(r.End)) {
		due = append(due, t)
		if t, err = p.next(t); errors.Is(err, ErrNeverFires) {
			t = time.Time{} // no occurrence after this one: the schedule ends
			break
		} else if err != nil {
			return nil, false, err
		}
	}
	tolerance := r.CatchUp.Tolerance
	if tolerance == 0 {
		tolerance = DefaultTolerance
	}
	late := func(t time.Time) bool { return now.Sub(r.fireAt(t)) > tolerance }
	for i, t := range due {
		send := true
		switch r.CatchUp.Policy {
		case CatchUpSkip:
			send = !late(t)
		case CatchUpCoalesce:
			// Late occurrences are a prefix of due; send the last of them.
			send = !late(t) || i == len(due)-1 || !late(due[i+1])
		}
		params := OccurrenceParams{Schedule: r.Name, ID: OccurrenceID(r.Name, t), Nominal: t,
			Lateness: now.Sub(r.fireAt(t)), Late: late(t)}
		if !send {
			s.call(ctx, params, func(h Hooks) func(context.Context, OccurrenceParams) { return h.Skipped })
			r.skipOne(t)
			r.handled(t)
			continue
		}
		m := s.occurrenceMessage(r.Message, r.Name, t, CauseSchedule)
		if r.CatchUp.Policy == CatchUpCoalesce && late(t) {
			n := 1
			for j := i - 1; j >= 0 && late(due[j]); j-- {
				n++
			}
			if n > 1 {
				m.Properties[PropertyCoalesced] = itoa(n)
				params.Coalesced = n
			}
		}
		if _, err := s.sendNow(ctx, r, m, t); err != nil {
			return sent, false, err
		}
		if late(t) {
			r.Late++
		}
		r.Sent++
		s.call(ctx, params, func(h Hooks) func(context.Context, OccurrenceParams) { return h.Sent })
		r.handled(t)
		sent = append(sent, sentOccurrence{t, late(t)})
	}
	r.Next = t
	switch {
	case t.IsZero():
		r.Ended = true
	case len(due) == maxPerTick && !r.fireAt(t).After(now):
		return sent, true, nil
	case !r.End.IsZero() && t.After(r.End):
		r.Ended, r.Next = true, time.Time{}
	}
	return sent, false, nil
}

// sentOccurrence is an occurrence fire sent, and whether it was late.
type sentOccurrence struct {
	nominal time.Time
	late    bool
}

// noteSent notes, in the record of the schedule name, the occurrences
// sent whose write lost to a concurrent one: those the record still has
// pending (from its Next on, in order) are counted as sent, and the
// record planned from the one after them. One the record plans (the
// concurrent writer scheduled its message: fire's send was that
// message's duplicate, or the other way round) is counted once, by the
// plan. The concurrent writer's tick, stale then, is cancelled.
func (s *Scheduler) noteSent(ctx context.Context, name string, sent []sentOccurrence) error {
	_, err := s.update(ctx, name, func(r *record) (bool, error) {
		p, err := s.planner(r)
		if err != nil {
			return false, err
		}
		n := 0
		for _, o := range sent {
			if !r.Next.Equal(o.nominal) || r.Ended || len(r.Plan) > 0 {
				break
			}
			r.Sent++
			if o.late {
				r.Late++
			}
			r.handled(o.nominal)
			n++
			if r.Next, err = p.next(o.nominal); errors.Is(err, ErrNeverFires) {
				r.Ended, r.Next = true, time.Time{}
			} else if err != nil {
				return false, err
			}
			if !r.End.IsZero() && r.Next.After(r.End) {
				r.Ended, r.Next = true, time.Time{}
			}
		}
		return n > 0, nil
	})
	if errors.Is(err, ErrNotFound) {
		return nil // deleted meanwhile
	}
	return err
}

func itoa(n int) string { return strconv.Itoa(n) }

// call calls the hook pick selects of every Hooks given.
func (s *Scheduler) call(ctx context.Context, p OccurrenceParams, pick func(Hooks) func(context.Context, OccurrenceParams)) {
	for _, h := range s.hooks {
		if f := pick(h); f != nil {
			f(ctx, p)
		}
	}
}
