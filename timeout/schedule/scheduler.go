package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/internal/statelog"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// Scheduler keeps named schedules on a queue of a broker, and Run sends
// their occurrences. Every method is safe for concurrent use, and several
// Schedulers (in one process or many) may share a queue: each occurrence is
// handled by one of them.
type Scheduler struct {
	b         *transport.Broker
	queueName string
	cals      *calendar.Registry
	log       *slog.Logger
	hooks     []Hooks
	timeouts  timeout.Scheduler // the ticks' engine (WithTimeouts); nil: the queue itself
	horizon   time.Duration     // how far ahead occurrences are planned (WithHorizon)

	mu   sync.Mutex
	home *transport.Queue
	// targets stand in for the broker's queues and topics by key
	// ("q:name", "t:name"); tests set them. Others are asked of the
	// broker at every use: its handles follow DeleteQueue and OpenQueue.
	targets map[string]sender

	outageOn atomic.Bool // outage has failures: the hot path looks here only
	outageMu sync.Mutex
	outage   statelog.Failures // ticks waiting out an outage (run.go)
}

// sender is where an action sends: a queue or a topic, which both take
// scheduled messages and cancel them definitely.
type sender interface {
	Send(ctx context.Context, m *transport.Message) (transport.SendResult, error)
	CancelMany(ctx context.Context, seqs []uint64) []error
}

// New returns a scheduler that keeps its schedules on broker b. It opens
// its queue on first use. Options that are invalid return an error
// wrapping ErrInvalidOption.
func New(b *transport.Broker, opts ...Option) (*Scheduler, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil broker", ErrInvalidOption)
	}
	s := &Scheduler{b: b, queueName: DefaultQueue, log: slog.Default(), targets: map[string]sender{}, horizon: DefaultHorizon}
	s.outage.What = "schedule: sending an occurrence"
	for _, o := range opts {
		if err := o.apply(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Queue returns the name of the queue the scheduler keeps its schedules on.
func (s *Scheduler) Queue() string { return s.queueName }

func (s *Scheduler) queue(ctx context.Context) (*transport.Queue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.home != nil {
		return s.home, nil
	}
	q, err := s.b.Queue(ctx, s.queueName)
	if err != nil {
		return nil, err
	}
	cfg := q.Config()
	if cfg.Partitions > 1 {
		return nil, fmt.Errorf("%w: queue %s has %d partitions: the scheduler needs one", ErrInvalidOption, s.queueName, cfg.Partitions)
	}
	if cfg.LockDuration > MaxLockDuration {
		// A Run killed while it holds a tick delays that occurrence until
		// the tick's lock expires: keep it short.
		cfg.LockDuration = MaxLockDuration
		if q, err = s.b.OpenQueue(ctx, cfg); err != nil {
			return nil, err
		}
	}
	s.home = q
	return q, nil
}

// target returns where r's occurrences go. It asks the broker each time
// (which remembers its handles, so this is cheap): a handle kept here
// would outlive a DeleteQueue and miss the queue created again.
func (s *Scheduler) target(ctx context.Context, r *record) (sender, error) {
	key := "q:" + r.Queue
	if r.Topic != "" {
		key = "t:" + r.Topic
	}
	s.mu.Lock()
	t, ok := s.targets[key]
	s.mu.Unlock()
	if ok {
		return t, nil
	}
	if r.Topic != "" {
		return s.b.Topic(ctx, r.Topic)
	}
	return s.b.Queue(ctx, r.Queue)
}

func (s *Scheduler) planner(r *record) (*planner, error) { return newPlanner(r.Spec, s.cals, r.Start) }

// first returns the first occurrence of a schedule: for a cron spec the
// first instant at or after start, for a rule its due time from start.
func first(p *planner, start time.Time) (time.Time, error) {
	if p.spec.Rule == nil { // cron, or Every (whose first is start)
		return p.next(start.Add(-time.Nanosecond))
	}
	return p.next(start)
}

// Create stores a new schedule and plans its first occurrence: the first at
// or after Start, or, with a Start in the past, the first at or after now
// (Backfill sends those before). It returns
// ErrExists if the name is taken, and ErrInvalidName, ErrInvalidSpec,
// ErrNeverFires or ErrInvalidSchedule for a schedule it refuses.
func (s *Scheduler) Create(ctx context.Context, sch Schedule) error {
	if err := ValidateName(sch.Name); err != nil {
		return err
	}
	now := time.Now()
	if sch.Start.IsZero() {
		sch.Start = now.UTC().Truncate(time.Second)
	}
	p, err := newPlanner(sch.Spec, s.cals, sch.Start)
	if err != nil {
		return err
	}
	if err := s.checkAction(sch); err != nil {
		return err
	}
	r := &record{V: 1, Name: sch.Name, Spec: sch.Spec, Queue: sch.Action.Queue, Topic: sch.Action.Topic,
		Message: storeMsg(sch.Action.Message), Start: sch.Start, End: sch.End, CatchUp: sch.CatchUp,
		Jitter: sch.Jitter, Note: sch.Note, Created: now.UTC()}
	next, err := first(p, r.Start)
	if err == nil && next.Before(now) {
		// A Start in the past: the schedule begins now; Backfill sends the
		// occurrences before.
		next, err = s.firstAfter(p, r, now.Add(-time.Nanosecond))
	}
	if err != nil {
		return err
	}
	if !r.End.IsZero() && next.After(r.End) {
		return fmt.Errorf("%w: first occurrence %s is after the end %s", ErrNeverFires, next.UTC().Format(time.RFC3339), r.End.UTC().Format(time.RFC3339))
	}
	r.Next = next
	if err := s.extend(r, p, now); err != nil {
		return err
	}
	q, err := s.queue(ctx)
	if err != nil {
		return err
	}
	if err := s.commit(ctx, q, r, 0); err != nil {
		if errors.Is(err, transport.ErrStateConflict) {
			return fmt.Errorf("%w: %s", ErrExists, sch.Name)
		}
		return err
	}
	return nil
}

func (s *Scheduler) checkAction(sch Schedule) error {
	a := sch.Action
	switch {
	case (a.Queue == "") == (a.Topic == ""):
		return fmt.Errorf("%w: action needs exactly one of a queue and a topic", ErrInvalidSchedule)
	case a.Message == nil:
		return fmt.Errorf("%w: action without a message", ErrInvalidSchedule)
	case !a.Message.ScheduledAt.IsZero():
		return fmt.Errorf("%w: action message with ScheduledAt set", ErrInvalidSchedule)
	case sch.Jitter < 0 || sch.Jitter > MaxJitter:
		return fmt.Errorf("%w: jitter %s out of [0, %s]", ErrInvalidSchedule, sch.Jitter, MaxJitter)
	case sch.CatchUp.Policy < CatchUpFire || sch.CatchUp.Policy > CatchUpCoalesce:
		return fmt.Errorf("%w: catch-up policy %s", ErrInvalidSchedule, sch.CatchUp.Policy)
	case sch.CatchUp.Tolerance < 0:
		return fmt.Errorf("%w: negative catch-up tolerance", ErrInvalidSchedule)
	case !sch.End.IsZero() && !sch.Start.IsZero() && sch.End.Before(sch.Start):
		return fmt.Errorf("%w: end before start", ErrInvalidSchedule)
	}
	name := a.Queue
	if a.Topic != "" {
		name = a.Topic
	}
	if err := transport.ValidateQueueName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSchedule, err)
	}
	m := s.occurrenceMessage(storeMsg(a.Message), sch.Name, time.Now(), CauseSchedule)
	if err := s.b.Validate(m); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSchedule, err)
	}
	return nil
}

// occurrenceMessage returns the message of the occurrence at nominal.
func (s *Scheduler) occurrenceMessage(sm storedMsg, name string, nominal time.Time, cause string) *transport.Message {
	m := sm.message()
	if m.Properties == nil {
		m.Properties = map[string]string{}
	}
	m.MessageID = OccurrenceID(name, nominal)
	if cause == CauseTrigger {
		m.MessageID += "-trigger"
	}
	m.Properties[PropertySchedule] = name
	m.Properties[PropertyNominal] = nominal.UTC().Format(time.RFC3339Nano)
	m.Properties[PropertyCause] = cause
	return m
}

// Tick messages: the pending occurrence of each schedule is a message
// scheduled on the scheduler's queue for its time, in the same write as the
// record that names it (TickID). Run receives it and sends the occurrence.
const (
	tickSubject  = "jetsaga.schedule.tick"
	propTickName = "jetsaga-schedule"
	propTickID   = "jetsaga-schedule-tick"
	// propTickGen carries the generation of the record that names the
	// tick (record.Gen), so that Run tells a tick that came before its
	// record was written from a stale one.
	propTickGen = "jetsaga-schedule-gen"
	// propTickFireAt carries the record's FireAt, so that Run holds an
	// early tick before it reads the record, not between the read and the
	// send.
	propTickFireAt = "jetsaga-schedule-fire-at"
)

// resolveLead is how long before the first of its occurrences that a
// write intends (planned, message not yet scheduled) the record's tick is
// due while they are unresolved: should the writer die before it
// schedules them, a Run does it in time.
const resolveLead = 5 * time.Second

// commit writes r at revision rev, with a tick for r.Wake unless the
// schedule is paused or ended. When the plan holds intended occurrences
// (Seq 0), the record is written first, naming them, then their messages
// are scheduled on the target and the record written again with their
// numbers: every planned message is named by the record before it
// exists, so that Pause, Delete and Replan find it. Should the second
// write fail, the first one's tick, due resolveLead before the first
// intended occurrence, has a Run finish the work; commit returns nil once
// the first write is done.
func (s *Scheduler) commit(ctx context.Context, q *transport.Queue, r *record, rev uint64) error {
	if !r.unresolved() || r.retry {
		_, err := s.commitOnce(ctx, q, r, rev, true, false)
		return err
	}
	if r.guarded {
		return s.commitGuarded(ctx, q, r, rev)
	}
	wake := r.Wake
	for _, o := range r.Plan {
		if o.Seq == 0 && o.ID != activatedID {
			if at := r.fireAt(o.At).Add(-resolveLead); r.Wake.IsZero() || at.Before(r.Wake) {
				r.Wake = at
			}
		}
	}
	r.guardTick = true
	rev, err := s.commitOnce(ctx, q, r, rev, false, false)
	r.guardTick = false
	if err != nil {
		return err
	}
	oldSeq, oldRef := r.TickSeq, r.TickRef
	if err := s.resolve(ctx, r); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "schedule: occurrences not planned yet; trying again",
			slog.String("schedule", r.Name), slog.Time("at", r.Wake), slog.Any("error", err))
		return nil
	}
	r.Wake = wake
	if _, err := s.commitOnce(ctx, q, r, rev, true, false); err != nil {
		return nil // someone wrote after us; the record is theirs
	}
	s.dropTick(ctx, q, r, oldSeq, oldRef)
	return nil
}

// commitGuarded is commit for a Run that holds a tick of the schedule
// (fire): the first write already has the tick for r.Wake, and the second
// keeps it. Should the Run die in between, the tick it held is delivered
// again once its lock expires (well within half a horizon, before the
// first occurrence planned) and finishes the plan (see fire). A target
// that refuses has a tick retryDelay from now try again.
func (s *Scheduler) commitGuarded(ctx context.Context, q *transport.Queue, r *record, rev uint64) error {
	rev, err := s.commitOnce(ctx, q, r, rev, false, false)
	if err != nil {
		return err
	}
	if err := s.resolve(ctx, r); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "schedule: occurrences not planned yet; trying again",
			slog.String("schedule", r.Name), slog.Duration("in", retryDelay), slog.Any("error", err))
		oldSeq, oldRef := r.TickSeq, r.TickRef
		r.Wake, r.retry = time.Now().Add(retryDelay), true
		if _, err := s.commitOnce(ctx, q, r, rev, true, false); err == nil {
			s.dropTick(ctx, q, r, oldSeq, oldRef)
		}
		return nil
	}
	_, _ = s.commitOnce(ctx, q, r, rev, true, true) // a conflict: someone wrote after us
	return nil
}

// dropTick cancels the tick oldSeq (on the queue) or oldRef (on the
// engine) unless the record r names it: it is stale, and would wake a
// Run for nothing. Any outcome will do: a stale tick that fires is
// dropped.
func (s *Scheduler) dropTick(ctx context.Context, q *transport.Queue, r *record, oldSeq uint64, oldRef string) {
	if oldSeq != 0 && oldSeq != r.TickSeq {
		_ = q.Cancel(ctx, oldSeq)
	}
	if oldRef != "" && oldRef != r.TickRef {
		s.cancelRef(ctx, timeout.Ref(oldRef))
	}
}

// commitOnce writes r at revision rev, with a tick for r.Wake unless the
// schedule is paused or ended, and returns the record's new revision.
// The record never names a tick that was not written: the two go in one
// atomic write, or, on a queue where such a write is staged by the server
// and slow (StateCommitsStaged: one replica, file storage), or when the
// tick goes to a timeout engine (WithTimeouts), the tick first and the
// record after it. A tick written for a record that was then not written
// (a crash, a concurrent write) names an ID no record holds, and is
// dropped when it fires; one that fires before its record is written (it
// was due at once) waits for it (see handleTick). With storeSeq the
// tick's number, known once written, is written into the record after
// it, for Pause, Delete and Replan to cancel the tick. With keepTick the
// record keeps the tick it names, and no tick is written.
func (s *Scheduler) commitOnce(ctx context.Context, q *transport.Queue, r *record, rev uint64, storeSeq, keepTick bool) (uint64, error) {
	var tick *transport.Message
	r.Gen++
	if !keepTick {
		r.TickID, r.TickSeq, r.TickRef, r.FireAt = "", 0, "", time.Time{}
		if !r.Paused && !r.Ended && !r.Next.IsZero() {
			r.FireAt = r.fireAt(r.Next)
		}
	}
	if !keepTick && !r.Paused && !r.Ended && !r.Wake.IsZero() {
		// A random part makes the ID unique to this write, so that no
		// tick ID is ever reused (a queue remembers cancelled ones).
		r.TickID = OccurrenceID(r.Name, r.Next) + "/" + strconv.FormatUint(rand.Uint64(), 36)
		at := r.Wake
		tick = &transport.Message{MessageID: r.TickID, Subject: tickSubject, ScheduledAt: at,
			Properties: map[string]string{propTickName: r.Name, propTickID: r.TickID, propTickGen: strconv.FormatUint(r.Gen, 10),
				propTickFireAt: at.UTC().Format(time.RFC3339Nano)}}
	}
	if tick != nil && s.timeouts != nil && !r.guardTick {
		// (A tick that only guards a plan being written, replaced at
		// once, stays on the queue.)
		if r.TickRef = s.scheduleTick(ctx, r, tick); r.TickRef != "" {
			tick = nil
		}
	}
	if tick != nil && q.StateCommitsStaged() {
		res, err := q.Send(ctx, tick)
		if err != nil {
			return 0, err
		}
		r.TickSeq, tick = res.Seq, nil
	}
	v, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	c := transport.StateCommit{Key: recordPrefix + r.Name, Value: v, Rev: rev}
	if tick != nil {
		c.Schedule = []*transport.Message{tick}
	}
	res, err := q.CommitState(ctx, c)
	if errors.Is(err, transport.ErrStateConflict) && r.TickID != "" {
		// A commit whose answer was lost and that a retry found stored is
		// reported as a conflict (transport.Queue.CommitState): the record
		// tells whether it is ours, by the tick ID unique to this write.
		if b, cur, lerr := q.LoadState(ctx, recordPrefix+r.Name); lerr == nil {
			if stored, derr := decodeRecord(b); derr == nil && stored.TickID == r.TickID && stored.Gen == r.Gen {
				res, err = transport.StateResult{Rev: cur}, nil
			}
		}
	}
	if err != nil {
		if r.TickRef != "" {
			// The record does not name this tick: it would fire for
			// nothing (a month from now, maybe). Best effort.
			s.cancelRef(ctx, timeout.Ref(r.TickRef))
		}
		return 0, err
	}
	if tick != nil && len(res.Seqs) == 1 {
		r.TickSeq = res.Seqs[0]
		if !storeSeq {
			return res.Rev, nil
		}
		// The tick's sequence number is known only once written; store it
		// for Pause, Delete and Replan to cancel it. Best effort: a
		// conflict means someone wrote after us, with their own tick.
		if v, err = json.Marshal(r); err == nil {
			if res2, err := q.CommitState(ctx, transport.StateCommit{Key: recordPrefix + r.Name, Value: v, Rev: res.Rev}); err == nil {
				return res2.Rev, nil
			}
		}
	}
	return res.Rev, nil
}

// scheduleTick schedules the tick of r on the engine given WithTimeouts,
// for its time, and returns its ref; or "" if the engine refused it (it
// is down, say): the caller then writes the tick on the queue, so that an
// engine that fails never stops a schedule. A tick only plans: the
// occurrences it plans are due half a horizon after it at the soonest, so
// the engine's lateness (a Temporal timer shorter than a second fires
// after one, a longer one some 100 ms late) needs no lead.
func (s *Scheduler) scheduleTick(ctx context.Context, r *record, tick *transport.Message) string {
	m := *tick
	m.ScheduledAt = time.Time{}
	ref, err := s.timeouts.Schedule(ctx, timeout.Timeout{ID: r.TickID, Queue: s.queueName, At: tick.ScheduledAt, Message: &m})
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "schedule: the timeout engine refused a tick; it goes on the schedule queue",
			slog.String("schedule", r.Name), slog.String("tick", r.TickID), slog.Any("error", err))
		return ""
	}
	return string(ref)
}

// cancelRef cancels a tick scheduled on the timeout engine, if this
// scheduler has it; any outcome will do (a tick that fires finds its
// record naming another, and is dropped).
func (s *Scheduler) cancelRef(ctx context.Context, ref timeout.Ref) {
	if s.timeouts != nil && ref != "" {
		_ = s.timeouts.Cancel(ctx, ref)
	}
}

// load reads the record of name.
func (s *Scheduler) load(ctx context.Context, name string) (*transport.Queue, *record, uint64, error) {
	if err := ValidateName(name); err != nil {
		return nil, nil, 0, err
	}
	q, err := s.queue(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	b, rev, err := q.LoadState(ctx, recordPrefix+name)
	if errors.Is(err, transport.ErrStateNotFound) {
		return nil, nil, 0, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, nil, 0, err
	}
	r, err := decodeRecord(b)
	return q, r, rev, err
}

// update applies change to the record of name and writes it, again on a
// concurrent write. change returns false to write nothing.
func (s *Scheduler) update(ctx context.Context, name string, change func(r *record) (bool, error)) (*record, error) {
	for {
		q, r, rev, err := s.load(ctx, name)
		if err != nil {
			return nil, err
		}
		oldSeq, oldRef := r.TickSeq, r.TickRef
		write, err := change(r)
		if err != nil || !write {
			return r, err
		}
		err = s.commit(ctx, q, r, rev)
		if errors.Is(err, transport.ErrStateConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		s.dropTick(ctx, q, r, oldSeq, oldRef)
		return r, nil
	}
}

// Get returns the schedule named name, or ErrNotFound.
func (s *Scheduler) Get(ctx context.Context, name string) (Info, error) {
	_, r, _, err := s.load(ctx, name)
	if err != nil {
		return Info{}, err
	}
	s.view(r, time.Now())
	return r.info(), nil
}

// view counts, in r as read (not written), the planned occurrences due
// by now as sent: the server sent them at their time, and a Run counts
// them in the record at its next tick.
func (s *Scheduler) view(r *record, now time.Time) {
	if p, err := s.planner(r); err == nil {
		_, _ = r.settle(p, now, nil)
		if !r.Paused && !r.Ended && !r.Next.IsZero() {
			r.FireAt = r.fireAt(r.Next)
		}
	}
}

// withdrawAll cancels the plan of r (see withdraw).
func (s *Scheduler) withdrawAll(ctx context.Context, r *record) error {
	if len(r.Plan) == 0 {
		return nil
	}
	p, err := s.planner(r)
	if err != nil {
		return err
	}
	return s.withdraw(ctx, r, p, 0)
}

// List yields every schedule on the scheduler's queue, in no particular
// order.
func (s *Scheduler) List(ctx context.Context) iter.Seq2[Info, error] {
	return func(yield func(Info, error) bool) {
		q, err := s.queue(ctx)
		if err != nil {
			yield(Info{}, err)
			return
		}
		for key, err := range q.StateKeys(ctx, recordPrefix) {
			if err != nil {
				yield(Info{}, err)
				return
			}
			info, err := s.Get(ctx, key[len(recordPrefix):])
			if errors.Is(err, ErrNotFound) {
				continue // deleted meanwhile
			}
			if !yield(info, err) {
				return
			}
		}
	}
}

// Upcoming returns the nominal times of the next n occurrences of the
// schedule named name, from its pending one, as its calendar stands (an
// occurrence not yet planned may move with a new calendar version).
func (s *Scheduler) Upcoming(ctx context.Context, name string, n int) ([]time.Time, error) {
	_, r, _, err := s.load(ctx, name)
	if err != nil {
		return nil, err
	}
	s.view(r, time.Now())
	p, err := s.planner(r)
	if err != nil {
		return nil, err
	}
	t := r.Next
	if r.Paused || t.IsZero() {
		if r.Ended {
			return nil, nil
		}
		if t, err = p.next(time.Now()); err != nil || r.Spec.Rule != nil {
			t, err = s.firstAfter(p, r, time.Now())
		}
		if err != nil {
			return nil, err
		}
	}
	var out []time.Time
	for len(out) < n && !t.IsZero() && (r.End.IsZero() || !t.After(r.End)) {
		out = append(out, t)
		if t, err = p.next(t); err != nil {
			break
		}
	}
	return out, nil
}

// firstAfter returns the first occurrence of r strictly after t: for a rule,
// counted along its chain from the pending occurrence (or Start).
func (s *Scheduler) firstAfter(p *planner, r *record, t time.Time) (time.Time, error) {
	if r.Spec.Rule == nil { // cron or Every: computed from t
		return p.next(t)
	}
	o := r.Next
	if o.IsZero() {
		var err error
		if o, err = first(p, r.Start); err != nil {
			return time.Time{}, err
		}
	}
	for !o.After(t) {
		var err error
		if o, err = p.next(o); err != nil {
			return time.Time{}, err
		}
	}
	return o, nil
}

// Pause stops the schedule named name: its pending occurrence is not sent,
// nor any until Resume. note says why, for operators. Pausing a paused
// schedule changes its note only.
func (s *Scheduler) Pause(ctx context.Context, name, note string) error {
	_, err := s.update(ctx, name, func(r *record) (bool, error) {
		if err := s.withdrawAll(ctx, r); err != nil {
			return false, err
		}
		if !r.Paused {
			r.PausedAt = time.Now().UTC()
		}
		r.Paused, r.PauseNote = true, note
		return true, nil
	})
	return err
}

// Resume starts a paused schedule again from its first occurrence after
// now: the occurrences that fell in the pause are skipped (counted in
// Skipped; Backfill sends them). note replaces the pause note (empty
// clears it). Resuming a schedule that is not paused does nothing.
func (s *Scheduler) Resume(ctx context.Context, name, note string) error {
	_, err := s.update(ctx, name, func(r *record) (bool, error) {
		if !r.Paused {
			return false, nil
		}
		p, err := s.planner(r)
		if err != nil {
			return false, err
		}
		now := time.Now()
		for n := 0; !r.Next.IsZero() && !r.Next.After(now) && n < MaxBackfill; n++ {
			if !r.End.IsZero() && r.Next.After(r.End) {
				break
			}
			r.skipOne(r.Next)
			r.handled(r.Next)
			if r.Next, err = p.next(r.Next); err != nil {
				return false, err
			}
		}
		if !r.Next.After(now) {
			if r.Next, err = s.firstAfter(p, r, now); err != nil {
				return false, err
			}
		}
		if !r.End.IsZero() && r.Next.After(r.End) {
			r.Ended, r.Next = true, time.Time{}
		}
		r.Paused, r.PausedAt, r.PauseNote = false, time.Time{}, note
		return true, s.extend(r, p, now)
	})
	return err
}

// Trigger sends an occurrence of the schedule named name now, whatever its
// spec says and whether or not it is paused. Its ID is the occurrence ID of
// now with "-trigger" appended, and its PropertyCause CauseTrigger; the
// schedule's own occurrences are not changed.
func (s *Scheduler) Trigger(ctx context.Context, name string) (Occurrence, error) {
	_, r, _, err := s.load(ctx, name)
	if err != nil {
		return Occurrence{}, err
	}
	now := time.Now().UTC()
	m := s.occurrenceMessage(r.Message, r.Name, now, CauseTrigger)
	dup, err := s.send(ctx, r, m)
	if err != nil {
		return Occurrence{}, err
	}
	return Occurrence{ID: m.MessageID, Nominal: now, Duplicate: dup, Sent: true}, nil
}

// Backfill sends the occurrences of the schedule named name whose nominal
// times are in [from, to] and not after now — before its Start too, except
// for a Rule, whose occurrences are counted from Start — with PropertyCause
// CauseBackfill, oldest first, and returns them. It leaves out those the
// schedule sent itself (Occurrence.Sent false) as far as its record tells:
// it sends those before the schedule's first, and those skipped by a pause
// or the catch-up policy (the latest 64 ranges of them). The target queue
// drops any whose ID it remembers (Occurrence.Duplicate). More than
// MaxBackfill occurrences in the range is an error wrapping
// ErrInvalidSchedule, and nothing is sent.
func (s *Scheduler) Backfill(ctx context.Context, name string, from, to time.Time) ([]Occurrence, error) {
	_, r, _, err := s.load(ctx, name)
	if err != nil {
		return nil, err
	}
	if to.Before(from) {
		return nil, fmt.Errorf("%w: backfill range ends before it starts", ErrInvalidSchedule)
	}
	now := time.Now()
	if to.After(now) {
		to = now
	}
	s.view(r, now) // planned occurrences due by now were sent by the schedule
	p, err := s.planner(r)
	if err != nil {
		return nil, err
	}
	var ts []time.Time
	t, err := first(p, r.Start) // a rule's occurrences are a chain from Start
	if r.Spec.Rule == nil {
		t, err = p.next(from.Add(-time.Nanosecond))
	}
	for ; err == nil && !t.After(to) && (r.End.IsZero() || !t.After(r.End)); t, err = p.next(t) {
		if t.Before(from) {
			continue
		}
		if len(ts) == MaxBackfill {
			return nil, fmt.Errorf("%w: more than %d occurrences in the backfill range", ErrInvalidSchedule, MaxBackfill)
		}
		ts = append(ts, t)
	}
	if err != nil && !errors.Is(err, ErrNeverFires) {
		return nil, err
	}
	out := make([]Occurrence, 0, len(ts))
	for _, t := range ts {
		o := Occurrence{ID: OccurrenceID(r.Name, t), Nominal: t}
		if !r.sentBySchedule(t) {
			m := s.occurrenceMessage(r.Message, r.Name, t, CauseBackfill)
			dup, err := s.sendNow(ctx, r, m, t) // its planned message, if any, was cancelled
			if err != nil {
				return out, err
			}
			o.Sent, o.Duplicate = true, dup
		}
		out = append(out, o)
	}
	return out, nil
}

// Delete removes the schedule named name; its pending occurrence is not
// sent.
func (s *Scheduler) Delete(ctx context.Context, name string) error {
	for {
		q, r, rev, err := s.load(ctx, name)
		if err != nil {
			return err
		}
		if err := s.withdrawAll(ctx, r); err != nil {
			return err
		}
		err = q.DeleteState(ctx, recordPrefix+name, rev)
		if errors.Is(err, transport.ErrStateConflict) {
			continue
		}
		if errors.Is(err, transport.ErrStateNotFound) {
			return fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		if err != nil {
			return err
		}
		// A tick that fires finds no record and is dropped.
		if r.TickSeq != 0 {
			_ = q.Cancel(ctx, r.TickSeq)
		}
		s.cancelRef(ctx, timeout.Ref(r.TickRef))
		return nil
	}
}

// Replan plans the pending occurrence of the schedule named name again on
// version ref of its calendar (which must be in the registry and have the
// spec's calendar's name): counted from the last occurrence (or Start), as
// if the new version had always been in force. An occurrence already sent
// is not taken back. The planned occurrences that the new version keeps
// (the same times, from the first on) stay planned; the others are
// cancelled and the new ones planned.
func (s *Scheduler) Replan(ctx context.Context, name string, ref calendar.Ref) error {
	_, err := s.update(ctx, name, func(r *record) (bool, error) {
		if r.Spec.Calendar.Name != ref.Name {
			return false, fmt.Errorf("%w: schedule %s is on calendar %q, not %q", ErrInvalidSpec, r.Name, r.Spec.Calendar.Name, ref.Name)
		}
		nr := *r
		nr.Spec.Calendar = ref
		p, err := s.planner(&nr)
		if err != nil {
			return false, err
		}
		old, err := s.planner(r)
		if err != nil {
			return false, err
		}
		next, err := s.replanned(r, p)
		if err != nil {
			return false, err
		}
		// Keep the plan's prefix that the new version has too.
		k := 0
		for t := next; k < len(r.Plan) && r.Plan[k].At.Equal(t); k++ {
			if t, err = p.next(t); err != nil {
				t = time.Time{}
			}
		}
		if err := s.withdraw(ctx, r, old, k); err != nil {
			return false, err
		}
		r.Spec.Calendar = ref
		if r.Paused || r.Ended {
			return true, nil
		}
		if k == 0 {
			if next, err = s.replanned(r, p); err != nil {
				return false, err
			}
			r.Next = next
			if !r.End.IsZero() && next.After(r.End) {
				r.Ended, r.Next = true, time.Time{}
			}
		}
		return true, s.extend(r, p, time.Now())
	})
	return err
}

// replanned returns the pending occurrence of r on the planner p: the
// first after the last one handled (or from Start, as Create).
func (s *Scheduler) replanned(r *record, p *planner) (time.Time, error) {
	if !r.Last.IsZero() {
		return p.next(r.Last)
	}
	next, err := first(p, r.Start)
	if err == nil && next.Before(r.Created) {
		// As Create: nothing before the schedule was created.
		nr := *r
		nr.Next = time.Time{}
		next, err = s.firstAfter(p, &nr, r.Created.Add(-time.Nanosecond))
	}
	return next, err
}

func (s *Scheduler) send(ctx context.Context, r *record, m *transport.Message) (dup bool, err error) {
	t, err := s.target(ctx, r)
	if err != nil {
		return false, err
	}
	res, err := t.Send(ctx, m)
	if err != nil {
		return false, fmt.Errorf("schedule %s: send %s: %w", r.Name, m.MessageID, err)
	}
	return res.Duplicate, nil
}
