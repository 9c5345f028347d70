package timeout

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

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
	b *transport.Broker
}

// NewTransport returns a scheduler on broker b. It schedules on queues as
// they exist (Broker.Queue), creating missing ones with default settings.
func NewTransport(b *transport.Broker) *Transport { return &Transport{b: b} }

// Schedule schedules t.Message on t.Queue for t.At.
func (s *Transport) Schedule(ctx context.Context, t Timeout) (Ref, error) {
	if err := t.validate(); err != nil {
		return "", err
	}
	q, err := s.b.Queue(ctx, t.Queue)
	if err != nil {
		return "", err
	}
	m := *t.Message
	m.MessageID = t.ID
	seq, err := q.Schedule(ctx, &m, t.At)
	if err != nil {
		return "", err
	}
	return Ref(TransportEngine + ":" + t.Queue + ":" + strconv.FormatUint(seq, 10)), nil
}

// Cancel cancels the scheduled message ref names.
func (s *Transport) Cancel(ctx context.Context, ref Ref) error {
	queue, seq, err := parseTransportRef(ref)
	if err != nil {
		return err
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

func parseTransportRef(ref Ref) (queue string, seq uint64, err error) {
	rest, ok := strings.CutPrefix(string(ref), TransportEngine+":")
	i := strings.LastIndexByte(rest, ':')
	if !ok || i < 0 {
		return "", 0, fmt.Errorf("%w: %q", ErrInvalidRef, ref)
	}
	seq, err = strconv.ParseUint(rest[i+1:], 10, 64)
	if err != nil || !transport.IsScheduledSeq(seq) {
		return "", 0, fmt.Errorf("%w: %q", ErrInvalidRef, ref)
	}
	return rest[:i], seq, nil
}
