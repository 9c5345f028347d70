package transport

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/transport/internal/pull"
)

// jsSettler settles one JetStream delivery. The lock is tracked on the
// client from the moment of receipt, which is never later than the
// server's own ack deadline: a settle after it returns ErrLockLost and
// leaves the message to its redelivery.
type jsSettler struct {
	q           *jsQueue
	part        *jsPartition
	msg         *pull.Msg
	m           *Message
	count       int // delivery count
	lockedUntil time.Time
}

func (s *jsSettler) live() error {
	if err := s.q.d.check(); err != nil {
		return err
	}
	if time.Now().After(s.lockedUntil) {
		return fmt.Errorf("%w: seq %d locked until %s", ErrLockLost, s.m.Seq, s.lockedUntil.Format(time.RFC3339Nano))
	}
	return nil
}

func (s *jsSettler) complete(ctx context.Context) error {
	if err := s.live(); err != nil {
		return err
	}
	return s.acked(ctx, s.ack(ctx))
}

// completeNoWait acknowledges without a reply (see
// Delivery.CompleteNoWait).
func (s *jsSettler) completeNoWait(context.Context) error {
	if err := s.live(); err != nil {
		return err
	}
	return s.q.d.mapErr(s.msg.Ack())
}

// removalWait bounds how long a settle on a replicated stream waits for
// the stream leader to remove the acknowledged message.
const removalWait = 5 * time.Second

// acked finishes a settle whose ack returned err. On a replicated queue
// stream the server acknowledges the ack once the consumer has recorded
// it, and removes the message afterwards, through a proposal of the
// stream's own: until then Peek, Browse and AcceptNextSession (which read
// from the stream leader) would still see it. So a settle there returns
// once the leader no longer holds the message, or after removalWait (the
// ack stands either way; the removal is the server's to finish).
func (s *jsSettler) acked(ctx context.Context, err error) error {
	if err != nil || !s.part.replicated || s.part.n.topic {
		// A topic's message stays until every subscription has settled it.
		return s.q.d.mapErr(err)
	}
	deadline := time.Now().Add(removalWait)
	backoff := time.Millisecond
	for {
		gctx, cancel := context.WithTimeout(ctx, s.q.d.runner.FirstLimit()) // see tries
		_, err := s.part.queue.GetMsg(gctx, LocalSeq(s.m.Seq))
		cancel()
		if isNotFound(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return nil
		}
		if err != nil && s.q.d.check() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
			backoff = min(2*backoff, 50*time.Millisecond)
		}
	}
}

// abandon gives the message back. Abandoning its last delivery
// dead-letters it at once, as Service Bus does, rather than leaving it to
// housekeeping (the server would not deliver it again).
func (s *jsSettler) abandon(ctx context.Context) error {
	if err := s.live(); err != nil {
		return err
	}
	if !s.q.isDLQ && s.count >= s.q.cfg.MaxDeliveryCount {
		return s.deadLetter(ctx, ReasonMaxDeliveryCountExceeded,
			exhaustedDescription(s.count, s.q.cfg.MaxDeliveryCount), nil)
	}
	return s.q.d.mapErr(s.msg.Nak())
}

func (s *jsSettler) renew(ctx context.Context) (time.Time, error) {
	if err := s.live(); err != nil {
		return time.Time{}, err
	}
	until := time.Now().Add(s.q.cfg.LockDuration)
	if err := s.msg.InProgress(); err != nil {
		return time.Time{}, s.q.d.mapErr(err)
	}
	s.lockedUntil = until
	return until, nil
}

// deadLetter copies the message to the dead-letter stream, deduplicated
// by its queue and sequence number, and then acks it. A crash between the
// two redelivers the message, and dead-lettering it again is a duplicate.
func (s *jsSettler) deadLetter(ctx context.Context, reason, description string, edit func(*Message)) error {
	if s.q.isDLQ {
		return fmt.Errorf("%w: dead-lettering from a dead-letter queue", ErrUnsupported)
	}
	if err := s.q.d.check(); err != nil {
		return err
	}
	if err := s.q.publishDeadLetter(ctx, s.m, reason, description, edit); err != nil {
		return err
	}
	return s.acked(ctx, s.ack(ctx))
}

// publishDeadLetter writes m's dead-letter copy, with a Nats-Msg-Id made
// of its sequence number and enqueue time: a retried try (see tries), or
// another process moving the same message, is a duplicate.
func (q *jsQueue) publishDeadLetter(ctx context.Context, m *Message, reason, description string, edit func(*Message)) error {
	dl := *m
	if edit != nil {
		dl = *m.Clone()
		edit(&dl)
	}
	dl.DeadLetterReason, dl.DeadLetterDescription = reason, description
	dl.DeadLetterSource, dl.DeadLetterSeq = q.cfg.Name, m.Seq
	dlq := q.dlq.parts[0]
	msg := &nats.Msg{Subject: dlq.n.qSubj + ".m", Header: encodeHeader(&dl), Data: dl.Body}
	msg.Header.Set(jetstream.MsgIDHeader, "dl-"+strconv.FormatUint(m.Seq, 10)+"-"+m.EnqueuedAt.Format(time.RFC3339Nano))
	return q.d.mapErr(q.d.tries(ctx, func(tctx context.Context) error {
		_, err := q.d.js.PublishMsg(tctx, msg, noPubRetry)
		return err
	}))
}
