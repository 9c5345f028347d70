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

// TransportEngine is the engine name in refs issued by a Transport scheduler.
const TransportEngine = "queue"

// Transport schedules timeouts as scheduled messages on transport queues:
// on JetStream with a JetStream broker, in memory with a memory broker.
// The timeout's ID becomes the message's MessageID, so a repeated
// Schedule within the queue's DuplicateWindow is a no-op that returns the
// first ref.
type Transport struct {
	b    *transport.Broker
	name string
}

// TransportOption configures a Transport.
type TransportOption func(*Transport)

// WithEngineName names the engine in its refs and marks its timeouts with
// the name, so that two Transport engines in one Router (on two brokers,
// say) tell their refs and listings apart. Default: TransportEngine.
func WithEngineName(name string) TransportOption {
	return func(s *Transport) { s.name = name }
}

// NewTransport returns a scheduler on broker b. It schedules on queues as
// they exist (Broker.Queue), creating missing ones with default settings.
func NewTransport(b *transport.Broker, opts ...TransportOption) *Transport {
	s := &Transport{b: b, name: TransportEngine}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Schedule schedules t.Message on t.Queue for t.At.
func (s *Transport) Schedule(ctx context.Context, t Timeout) (Ref, error) {
	if err := t.validate(); err != nil {
		return "", err
	}
	q, err := s.b.Queue(ctx, t.Queue)
	if err != nil {
		return "", err
	}
	m := t.DeliveryMessage()
	m.Properties[PropertyTimeout] = s.name
	m.ScheduledAt = t.At
	r, err := q.Send(ctx, m)
	if err != nil {
		return "", err
	}
	// A repeated Schedule of a timeout no longer pending (it fired or was
	// cancelled) gets no sequence number: its ref carries 0 and the due
	// time, which is all Cancel needs then.
	return s.ref(t.Queue, r.Seq, t.At), nil
}

// Cancel cancels the scheduled message ref names, with the outcomes
// Scheduler documents (see transport.Queue.Cancel for how long a
// cancellation is remembered).
func (s *Transport) Cancel(ctx context.Context, ref Ref) error {
	queue, seq, due, err := s.parseRef(ref)
	if err != nil {
		return err
	}
	if seq == 0 {
		// Scheduled again after it had fired or been cancelled.
		if !due.IsZero() && time.Now().After(due) {
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

// Pending lists the timeouts scheduled on queue f.Queue (required: a
// listing of every queue yields ErrNoListing), in sequence order. Other
// scheduled messages on the queue (not scheduled by this engine) are not
// listed.
func (s *Transport) Pending(ctx context.Context, f Filter) iter.Seq2[Pending, error] {
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
		for m, err := range q.Browse(ctx, 0) {
			if err != nil {
				yield(Pending{}, err)
				return
			}
			if m.State != transport.Scheduled || m.Properties[PropertyTimeout] != s.name {
				continue
			}
			p := Pending{
				Ref:   s.ref(f.Queue, m.Seq, m.ScheduledAt),
				ID:    m.MessageID,
				Queue: f.Queue, Saga: m.Properties[PropertySaga], Instance: m.Properties[PropertyInstance],
				At: m.ScheduledAt, Properties: m.Properties, Seq: m.Seq,
			}
			if f.match(p) && !yield(p, nil) {
				return
			}
		}
	}
}

func (s *Transport) ref(queue string, seq uint64, due time.Time) Ref {
	return Ref(s.name + ":" + queue + ":" + strconv.FormatUint(seq, 10) + "@" + strconv.FormatInt(due.UnixNano(), 10))
}

// parseRef reads "<engine>:<queue>:<seq>@<due unix ns>", or the older
// "<engine>:<queue>:<seq>".
func (s *Transport) parseRef(ref Ref) (queue string, seq uint64, due time.Time, err error) {
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
