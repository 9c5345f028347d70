package timeout

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// QueueEngine is the engine name in refs issued by a Queue scheduler.
const QueueEngine = "queue"

// Queue schedules timeouts as scheduled messages on transport queues:
// on JetStream with a JetStream broker, in memory with a memory broker.
// The timeout's ID becomes the message's MessageID, so a repeated
// Schedule within the queue's DuplicateWindow is a no-op that returns the
// first ref.
//
// On JetStream a timeout's message becomes active on its queue by default
// up to DefaultEarlyActivation before its due time, and its receiver (the
// saga dispatcher) holds it until the due time: nats-server activates due
// message schedules on a 250 ms tick, so a message scheduled for its due
// time would reach its handler up to ~250 ms late. On the memory broker,
// which activates on time, it becomes active at its due time. See
// WithEarlyActivation, which sets the lead, and turns it off with 0.
type Queue struct {
	b       *transport.Broker
	name    string
	lead    time.Duration
	leadSet bool // WithEarlyActivation given, even with 0
}

// QueueOption configures a Queue.
type QueueOption func(*Queue)

// WithEngineName names the engine in its refs and marks its timeouts with
// the name, so that two queue engines in one Router (on two brokers,
// say) tell their refs and listings apart. Default: QueueEngine.
func WithEngineName(name string) QueueOption {
	return func(s *Queue) { s.name = name }
}

// DefaultEarlyActivation is the lead of a queue engine on JetStream
// when WithEarlyActivation is not given: nats-server activates due message schedules on a 250 ms tick
// (measured 0–270 ms after the scheduled time on a quiet machine), so a
// message scheduled 300 ms before its due time is on the queue by then,
// except under load that delays the server's tick by more than 30 ms.
const DefaultEarlyActivation = 300 * time.Millisecond

// MaxEarlyActivation bounds the lead of WithEarlyActivation, and so how
// long a receiver may have to hold a timeout.
const MaxEarlyActivation = 5 * time.Second

// WithEarlyActivation has the engine schedule each timeout's message lead
// before its due time (lead is clamped to [0, MaxEarlyActivation]).
// WithEarlyActivation(0) turns early activation off: messages activate at
// their due time or after (on JetStream up to ~250 ms after), as before
// it was the default. Without this option the lead is
// DefaultEarlyActivation on a broker that activates late
// (transport.Broker.ActivationTick above 0: JetStream) and 0 on the
// memory broker, which activates on time. The message carries the due
// time in PropertyDue, as every engine's does, and its ScheduledAt is the
// due time less lead; refs, listings (Pending.At) and Cancel still speak
// of the due time.
//
// It is for queues whose receivers hold a timeout until its due time: the
// saga dispatcher (saga.Dispatcher) does, for every timeout whose due time
// is after its ScheduledAt. Its handlers then see a timeout within
// milliseconds of its due time instead of up to the server's 250 ms tick
// later, and never before it; a receiver that crashes while holding one
// only delays it (it is redelivered when its lock expires). Every
// receiver of the queue must hold such timeouts: a receiver of your own
// that is not a saga dispatcher must hold each message until its
// PropertyDue, or its engine must be given WithEarlyActivation(0).
//
// What changes for Cancel: a timeout is activated, and Cancel returns
// ErrAlreadyFired, from lead before its due time on (on JetStream from
// lead + 500 ms before: the transport counts a message that close to its
// activation as activated). The outcome stays definite — ErrAlreadyFired
// means the message is delivered — but it may come before the due time.
// Sagas do not mind: a timeout that arrives after its saga cancelled it
// is dropped by its token, never handled.
func WithEarlyActivation(lead time.Duration) QueueOption {
	return func(s *Queue) { s.lead, s.leadSet = min(max(lead, 0), MaxEarlyActivation), true }
}

// NewQueue returns a scheduler on broker b. It schedules on queues as
// they exist (Broker.Queue), creating missing ones with default settings.
func NewQueue(b *transport.Broker, opts ...QueueOption) *Queue {
	s := &Queue{b: b, name: QueueEngine}
	for _, o := range opts {
		o(s)
	}
	if !s.leadSet && b.ActivationTick() > 0 {
		s.lead = DefaultEarlyActivation
	}
	return s
}

// EarlyActivation returns the engine's lead: how long before its due time
// a timeout's message becomes active (see WithEarlyActivation); 0 if it
// activates at its due time or after.
func (s *Queue) EarlyActivation() time.Duration { return s.lead }

// Schedule schedules t.Message on t.Queue for t.At, less the engine's lead
// (see WithEarlyActivation).
func (s *Queue) Schedule(ctx context.Context, t Timeout) (Ref, error) {
	m, err := s.Message(t)
	if err != nil {
		return "", err
	}
	q, err := s.b.Queue(ctx, t.Queue)
	if err != nil {
		return "", err
	}
	r, err := q.Send(ctx, m)
	if err != nil {
		return "", err
	}
	// A repeated Schedule of a timeout no longer pending (it fired or was
	// cancelled) gets no sequence number: its ref carries 0 and the due
	// time, which is all Cancel needs then.
	return s.Ref(t, r.Seq), nil
}

// Message returns the message Schedule stores on t.Queue for t: its
// delivery message, scheduled (ScheduledAt) for t.At less the engine's
// lead. With Ref, it lets code that writes the message itself — in the
// same write as something else (transport.Queue.CommitState) — schedule
// t exactly as Schedule would.
func (s *Queue) Message(t Timeout) (*transport.Message, error) {
	if err := t.validate(); err != nil {
		return nil, err
	}
	m := t.DeliveryMessage()
	m.Properties[PropertyTimeout] = s.name
	m.ScheduledAt = t.At.Add(-s.lead)
	return m, nil
}

// Ref returns the ref of t scheduled on t.Queue as the scheduled sequence
// number seq: what Schedule returns, and Cancel takes.
func (s *Queue) Ref(t Timeout, seq uint64) Ref {
	return Ref(s.name + ":" + t.Queue + ":" + strconv.FormatUint(seq, 10) + "@" + strconv.FormatInt(t.At.UnixNano(), 10))
}

// Broker returns the broker the engine schedules on.
func (s *Queue) Broker() *transport.Broker { return s.b }

// Cancel cancels the scheduled message ref names, with the outcomes
// Scheduler documents (see transport.Queue.Cancel for how long a
// cancellation is remembered). With early activation (the default on
// JetStream), a timeout within its lead of its due time has been
// activated: Cancel returns
// ErrAlreadyFired, and the message is delivered (to be held until the due
// time by its receiver).
func (s *Queue) Cancel(ctx context.Context, ref Ref) error {
	queue, seq, due, err := s.parseRef(ref)
	if err != nil {
		return err
	}
	if seq == 0 {
		// Scheduled again after it had fired or been cancelled: it fired
		// if its activation time has passed.
		if !due.IsZero() && !time.Now().Before(due.Add(-s.lead)) {
			return fmt.Errorf("%w: %s: due %s", ErrAlreadyFired, ref, due.Format(time.RFC3339Nano))
		}
		return fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	q, err := s.b.Queue(ctx, queue)
	if err != nil {
		return err
	}
	err = q.Cancel(ctx, seq)
	switch {
	case errors.Is(err, transport.ErrAlreadyActivated):
		return fmt.Errorf("%w: %w", ErrAlreadyFired, err)
	case errors.Is(err, transport.ErrNotFound):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// Pending lists the timeouts of this engine on queue f.Queue (required: a
// listing of every queue yields ErrNoListing), partition by partition:
// those still scheduled, in sequence order, then those activated early
// and not yet due (Pending.Activating; see Activating), which a receiver
// holds until their due time or which wait on the queue for one. Other
// scheduled messages on the queue (not scheduled by this engine) are not
// listed. At is the due time the message carries (PropertyDue), else its
// ScheduledAt.
//
// It reads the queue's scheduled messages and, with early activation, the
// tail of its active messages enqueued within the engine's lead (plus a
// second), never the backlog of active messages before it. A timeout
// that activates while it is being listed may be listed twice, scheduled
// and activating; none is missed.
func (s *Queue) Pending(ctx context.Context, f Filter) iter.Seq2[Pending, error] {
	return func(yield func(Pending, error) bool) {
		if f.Queue == "" {
			yield(Pending{}, fmt.Errorf("%w: the transport engine lists one queue at a time: set Filter.Queue", ErrNoListing))
			return
		}
		q, err := s.b.Queue(ctx, f.Queue)
		if err != nil {
			yield(Pending{}, err)
			return
		}
		for part := range q.Config().Partitions {
			for m, err := range q.Browse(ctx, partitionSeq(part, true, 1)) {
				if err != nil {
					yield(Pending{}, err)
					return
				}
				if transport.Partition(m.Seq) != part || m.State != transport.Scheduled {
					break // the next partition
				}
				if m.Properties[PropertyTimeout] != s.name {
					continue
				}
				p := pendingOf(q.Name(), s.name, m, m.Seq, dueOf(m))
				if f.match(p) && !yield(p, nil) {
					return
				}
			}
			if s.lead == 0 {
				continue
			}
			for p, err := range activating(ctx, q, part, s.lead, time.Now()) {
				if err != nil {
					yield(Pending{}, err)
					return
				}
				if p.Properties[PropertyTimeout] == s.name && f.match(p) && !yield(p, nil) {
					return
				}
			}
		}
	}
}

// parseRef reads "<engine>:<queue>:<seq>@<due unix ns>", or the older
// "<engine>:<queue>:<seq>".
func (s *Queue) parseRef(ref Ref) (queue string, seq uint64, due time.Time, err error) {
	bad := fmt.Errorf("%w: %q", ErrInvalidRef, ref)
	rest, ok := strings.CutPrefix(string(ref), s.name+":")
	i := strings.LastIndexByte(rest, ':')
	if !ok || i < 0 {
		return "", 0, due, bad
	}
	seqPart, duePart, hasDue := strings.Cut(rest[i+1:], "@")
	if hasDue {
		ns, err := strconv.ParseInt(duePart, 10, 64)
		if err != nil {
			return "", 0, due, bad
		}
		due = time.Unix(0, ns)
	}
	seq, err = strconv.ParseUint(seqPart, 10, 64)
	if err != nil || seq != 0 && !transport.IsScheduledSeq(seq) || seq == 0 && !hasDue {
		return "", 0, due, bad
	}
	return rest[:i], seq, due, nil
}
