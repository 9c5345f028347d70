package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// Errors of the package; match them with errors.Is.
var (
	// ErrInvalidName: a schedule name that is not 1-64 characters of
	// [A-Za-z0-9_-] (so never a NATS subject token with '.', '*' or '>').
	ErrInvalidName = errors.New("schedule: invalid name")
	// ErrInvalidSpec: a spec that is incomplete (none of a cron expression,
	// a rule and an interval), ambiguous (more than one of them), malformed,
	// in an unknown zone, or names a calendar the scheduler does not have.
	ErrInvalidSpec = errors.New("schedule: invalid spec")
	// ErrNeverFires: a spec that names no instant that exists ("0 0 30 2 *",
	// February 30), or none between the schedule's Start and End.
	ErrNeverFires = errors.New("schedule: spec never fires")
	// ErrInvalidSchedule: an action, a catch-up policy, a jitter or a range
	// that cannot be used.
	ErrInvalidSchedule = errors.New("schedule: invalid schedule")
	// ErrExists: Create of a name that is taken.
	ErrExists = errors.New("schedule: already exists")
	// ErrNotFound: no schedule of that name.
	ErrNotFound = errors.New("schedule: not found")
	// ErrInvalidOption: an option given to New is invalid.
	ErrInvalidOption = errors.New("schedule: invalid option")
)

// Properties the scheduler sets on each occurrence's message, beside its
// MessageID, which is the occurrence ID.
const (
	// PropertySchedule carries the schedule's name.
	PropertySchedule = "jetsaga-schedule"
	// PropertyNominal carries the occurrence's nominal time (RFC 3339, UTC):
	// when the spec says it is due, before jitter and however late it is
	// sent.
	PropertyNominal = "jetsaga-schedule-nominal"
	// PropertyCause says why the message was sent: CauseSchedule,
	// CauseTrigger or CauseBackfill.
	PropertyCause = "jetsaga-schedule-cause"
	// PropertyCoalesced is set, on an occurrence that CatchUpCoalesce sent for
	// several late ones, to how many it stands for (itself included).
	PropertyCoalesced = "jetsaga-schedule-coalesced"
)

// Values of PropertyCause.
const (
	CauseSchedule = "schedule"
	CauseTrigger  = "trigger"
	CauseBackfill = "backfill"
)

// DefaultQueue is the queue a Scheduler keeps its schedules on when New is
// not given WithQueue.
const DefaultQueue = "jetsaga-schedules"

// MaxLockDuration is the longest LockDuration the scheduler leaves on its
// queue (it lowers a longer one when it opens the queue): a Run that dies
// while it holds a schedule's tick delays that schedule's planning until
// the lock expires (plus the broker's grace), which half of the horizon
// outlasts (MinHorizon).
const MaxLockDuration = 10 * time.Second

// DefaultTolerance is the catch-up tolerance of a schedule that gives none.
const DefaultTolerance = time.Second

// MaxJitter bounds Schedule.Jitter.
const MaxJitter = time.Hour

// MaxBackfill bounds how many occurrences one Backfill sends.
const MaxBackfill = 10_000

// CatchUpPolicy says what the scheduler does with occurrences it sends late:
// after its runners, or the server, were down past their nominal time. It
// has the meanings of the saga package's catch-up policies for timeouts.
type CatchUpPolicy int

const (
	// CatchUpFire sends every occurrence, however late. The default.
	CatchUpFire CatchUpPolicy = iota
	// CatchUpSkip sends no occurrence more than the tolerance late; it
	// counts them (Info.Skipped) and Backfill can send them later.
	CatchUpSkip
	// CatchUpCoalesce sends, of a run of occurrences more than the tolerance
	// late, only the latest, with PropertyCoalesced set to how many it stands
	// for; the others are counted as skipped.
	CatchUpCoalesce
)

// String returns "fire", "skip" or "coalesce".
func (p CatchUpPolicy) String() string {
	switch p {
	case CatchUpFire:
		return "fire"
	case CatchUpSkip:
		return "skip"
	case CatchUpCoalesce:
		return "coalesce"
	}
	return fmt.Sprintf("CatchUpPolicy(%d)", int(p))
}

// CatchUp is a schedule's catch-up policy: an occurrence is late when it is
// sent more than Tolerance after its nominal time (jitter included).
type CatchUp struct {
	// Policy applies to late occurrences. Default: CatchUpFire.
	Policy CatchUpPolicy `json:"policy,omitempty"`
	// Tolerance is how late an occurrence may be and still count as on
	// time. Default: DefaultTolerance.
	Tolerance time.Duration `json:"tolerance,omitempty"`
}

// Action is what an occurrence does: send a copy of Message to a queue or
// a topic, which may start a saga (a saga started by a message type the
// message's Subject names).
type Action struct {
	// Queue is the queue to send to. Exactly one of Queue and Topic.
	Queue string `json:"queue,omitempty"`
	// Topic is the topic to publish to. Exactly one of Queue and Topic.
	Topic string `json:"topic,omitempty"`
	// Message is the message each occurrence sends: its body and properties
	// as given, its MessageID set to the occurrence ID and the properties
	// PropertySchedule, PropertyNominal and PropertyCause added. Its
	// ScheduledAt must be zero. Required.
	Message *transport.Message `json:"-"`
}

// Schedule is a named recurring schedule: when (Spec), what (Action), and
// its policies.
type Schedule struct {
	// Name identifies the schedule: 1-64 characters of [A-Za-z0-9_-].
	// Required.
	Name string
	// Spec says when the occurrences are. Required.
	Spec Spec
	// Action says what each occurrence does. Required.
	Action Action
	// Start is the first instant an occurrence may have, and a Rule's
	// anchor (its first occurrence is counted from Start). A Start in the
	// past anchors a Rule, but the schedule sends no occurrence before it
	// was created (Backfill does). Default: when the schedule is created.
	Start time.Time
	// End, if set, is the last instant an occurrence may have.
	// Default: zero, no end.
	End time.Time
	// CatchUp says what happens to late occurrences. Default: fire all.
	CatchUp CatchUp
	// Jitter, if above 0, delays each occurrence by up to Jitter, by an
	// amount fixed by its occurrence ID (so a re-plan or a retry keeps it);
	// PropertyNominal still carries the nominal time. At most MaxJitter.
	// Default: 0.
	Jitter time.Duration
	// Note is free text for operators. Default: empty.
	Note string
}

// Info is a schedule as its record stands: its definition and its state.
type Info struct {
	Schedule
	// Created is when the schedule was created.
	Created time.Time
	// Next is the nominal time of the pending occurrence; zero when the
	// schedule is paused or has ended.
	Next time.Time
	// FireAt is when the pending occurrence is sent: Next plus its jitter.
	FireAt time.Time
	// Last is the nominal time of the last occurrence sent or skipped.
	Last time.Time
	// Paused, PausedAt and PauseNote tell whether and since when the
	// schedule is paused, and why.
	Paused    bool
	PausedAt  time.Time
	PauseNote string
	// Ended is true when no occurrence is left before End.
	Ended bool
	// Sent, Skipped and Late count the occurrences sent, skipped (by the
	// catch-up policy or a pause) and sent more than the tolerance late.
	Sent, Skipped, Late int64
	// Engine names the timeout engine that holds the pending occurrence's
	// tick (see WithTimeouts): timeout.QueueEngine ("queue") for a
	// scheduled message on the scheduler's queue, else the engine's name
	// ("temporal"); empty when none is pending.
	Engine string
}

// Occurrence is one occurrence's message as Trigger or Backfill sent it.
type Occurrence struct {
	// ID is the occurrence ID: the message's MessageID.
	ID string
	// Nominal is the occurrence's nominal time.
	Nominal time.Time
	// Duplicate is true when the queue already remembered the ID and
	// dropped the message (it was sent before, within the queue's
	// DuplicateWindow).
	Duplicate bool
	// Sent is false for an occurrence Backfill left out because the
	// schedule itself sent it.
	Sent bool
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidateName returns an error wrapping ErrInvalidName unless name is 1-64
// characters of [A-Za-z0-9_-].
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: %q: want 1-64 characters of [A-Za-z0-9_-]", ErrInvalidName, name)
	}
	return nil
}

// OccurrenceID returns the ID of the occurrence of the schedule name at
// nominal time t: "name@20260105T090000Z" (UTC, to the second; finer
// instants get their fraction: "name@20260105T090000.5Z").
func OccurrenceID(name string, t time.Time) string {
	return name + "@" + t.UTC().Format("20060102T150405.999999999Z")
}

// Option configures a Scheduler.
type Option interface{ apply(*Scheduler) error }

type optionFunc func(*Scheduler) error

func (f optionFunc) apply(s *Scheduler) error { return f(s) }

// WithQueue keeps the schedules' records and their pending occurrences on
// the queue named name, of one partition, which must be the scheduler's
// own: Run dead-letters any other message it receives there (reason
// "NotATick"). Default: DefaultQueue.
func WithQueue(name string) Option {
	return optionFunc(func(s *Scheduler) error {
		if err := transport.ValidateQueueName(name); err != nil {
			return fmt.Errorf("%w: queue: %w", ErrInvalidOption, err)
		}
		s.queueName = name
		return nil
	})
}

// WithTimeouts has the scheduler wake up to plan each schedule through
// the timeout engine ts rather than by a scheduled message it writes on
// its queue with the schedule's record: a timeout.Timeout whose message
// (the tick) ts delivers to the scheduler's queue at its time, where Run
// receives it and plans (see the package documentation: a tick is due
// half a horizon before the occurrences it plans, so the engine's
// lateness, up to a second for a Temporal timer shorter than a second,
// delays none). ts is typically the Temporal engine (the nested
// module github.com/jetsaga/jetsaga/timeout/temporal), whose workers must
// deliver to the broker the scheduler uses, or a timeout.Router that
// sends long gaps (a monthly run) to Temporal and short ones to the
// queue. Records, occurrence IDs, policies and operator commands are the
// same on every engine.
//
// The tick is scheduled first and the record written after it (the two
// cannot be one write across engines); a tick whose record was then not
// written is cancelled, and if it fires anyway it is dropped. An engine
// that refuses a tick (Temporal down) does not stop the schedule: the
// warning is logged and that tick is written on the queue, as without
// this option. A Scheduler without the option (the jetsaga command) that
// pauses, resumes or re-plans a schedule writes its tick on the queue and
// cannot cancel the old one on the engine, which is dropped when it
// fires; the next occurrence Run handles goes back to the engine.
// Default: none, ticks are scheduled messages on the scheduler's queue.
func WithTimeouts(ts timeout.Scheduler) Option {
	return optionFunc(func(s *Scheduler) error {
		if ts == nil {
			return fmt.Errorf("%w: nil timeout scheduler", ErrInvalidOption)
		}
		s.timeouts = ts
		return nil
	})
}

// WithHorizon sets how far ahead the scheduler plans each schedule's
// occurrences, as messages scheduled on the target for their times (at
// most MaxPlanned of a schedule): a Run writes them once half of the
// horizon is left, so that occurrences keep coming on time while no Run
// runs for up to half of it. It must be at least MinHorizon; every
// Scheduler of a queue should have the same. Default: DefaultHorizon.
func WithHorizon(d time.Duration) Option {
	return optionFunc(func(s *Scheduler) error {
		if d < MinHorizon {
			return fmt.Errorf("%w: horizon %s below %s", ErrInvalidOption, d, MinHorizon)
		}
		s.horizon = d
		return nil
	})
}

// WithCalendars gives the registry in which specs find their calendars.
func WithCalendars(reg *calendar.Registry) Option {
	return optionFunc(func(s *Scheduler) error {
		if reg == nil {
			return fmt.Errorf("%w: nil registry", ErrInvalidOption)
		}
		s.cals = reg
		return nil
	})
}

// Hooks are callbacks Run calls as it handles occurrences, for metrics and
// tracing (an OpenTelemetry adapter counts sent, skipped and late
// occurrences with them). Each may be nil; they must not block.
type Hooks struct {
	// Sent is called after an occurrence was sent (or found sent before,
	// after a crash); for an occurrence planned ahead, which the server
	// sends at its time, when a Run counts it as sent, at a tick after
	// its time (its Lateness is then 0).
	Sent func(ctx context.Context, p OccurrenceParams)
	// Skipped is called for each occurrence the catch-up policy skipped.
	Skipped func(ctx context.Context, p OccurrenceParams)
}

// OccurrenceParams describe an occurrence Run handled.
type OccurrenceParams struct {
	// Schedule is the schedule's name; ID the occurrence ID.
	Schedule, ID string
	// Nominal is the occurrence's nominal time.
	Nominal time.Time
	// Lateness is how long after its nominal time (jitter included) it was
	// handled; 0 for an occurrence planned ahead (the server sent it at
	// its time).
	Lateness time.Duration
	// Late is true beyond the schedule's catch-up tolerance.
	Late bool
	// Coalesced is, on an occurrence CatchUpCoalesce sent for several, how
	// many it stands for; else 0.
	Coalesced int
}

// WithHooks adds hooks; several WithHooks all get called, in order.
func WithHooks(h Hooks) Option {
	return optionFunc(func(s *Scheduler) error {
		s.hooks = append(s.hooks, h)
		return nil
	})
}

// WithLogger sets the logger of Run. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(s *Scheduler) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		s.log = l
		return nil
	})
}
