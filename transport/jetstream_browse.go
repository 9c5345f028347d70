package transport

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// peek reads active then scheduled messages of each partition from
// `from`, using direct gets of the next message on a subject filter.
func (q *jsQueue) peek(ctx context.Context, from uint64, max int) ([]*Message, error) {
	if err := q.d.check(); err != nil {
		return nil, err
	}
	var out []*Message
	for p := Partition(from); p < len(q.parts) && len(out) < max; p++ {
		part := q.parts[p]
		for _, scheduled := range []bool{false, true} {
			start := uint64(1)
			if low := makeSeq(p, scheduled, 0); from > low {
				if from > low|seqMask {
					continue // from lies beyond this range
				}
				start = LocalSeq(from)
			}
			stream, filter := part.queue, part.n.qSubj+".>"
			if scheduled {
				if part.sched == nil {
					continue
				}
				stream, filter = part.sched, part.n.sSubj+".*.s"
			}
			for len(out) < max {
				// In bounded tries, as every other read: a leader election
				// (after a node restart, or the stepdown that restarts a
				// stalled source) answers "temporarily unavailable".
				var raw *jetstream.RawStreamMsg
				err := q.d.tries(ctx, func(tctx context.Context) error {
					var err error
					raw, err = stream.GetMsg(tctx, start, jetstream.WithGetMsgSubject(filter))
					return err
				})
				if isNotFound(err) {
					break
				}
				if err != nil {
					return nil, q.d.mapErr(err)
				}
				out = append(out, rawMessage(raw, p, scheduled))
				start = raw.Sequence + 1
			}
		}
	}
	return out, nil
}

func rawMessage(raw *jetstream.RawStreamMsg, p int, scheduled bool) *Message {
	m := &Message{
		Body:       raw.Data,
		Seq:        makeSeq(p, scheduled, raw.Sequence),
		EnqueuedAt: raw.Time.UTC(),
		State:      Active,
	}
	if scheduled {
		m.State = Scheduled
	}
	decodeHeader(raw.Header, m)
	return m
}

// counts: on a queue or topic the partitions' stream message counts and
// schedule counters; on a subscription its consumers' pending counts.
func (q *jsQueue) counts(ctx context.Context) (Counts, error) {
	if err := q.d.check(); err != nil {
		return Counts{}, err
	}
	ctx, cancel := q.d.apiContext(ctx)
	defer cancel()
	var c Counts
	for _, part := range q.parts {
		info, err := part.queue.Info(ctx)
		if err != nil {
			return Counts{}, q.d.mapErr(err)
		}
		c.Active += int64(info.State.Msgs)
		if part.sched == nil {
			continue
		}
		n, err := q.scheduled(ctx, part)
		if err != nil {
			return Counts{}, err
		}
		c.Scheduled += n
	}
	if q.dlq != nil && q.dlq != q {
		info, err := q.dlq.parts[0].queue.Info(ctx)
		if err != nil {
			return Counts{}, q.d.mapErr(err)
		}
		c.DeadLettered = int64(info.State.Msgs)
	}
	return c, nil
}

// counterConsumer names the consumer of each schedule stream that counts
// its schedules: filtered on P.S.N.p.*.s, never pulled, so its pending
// count, which the server keeps up to date as schedules are stored,
// activated (removed) and cancelled (purged), is the number of schedules.
const counterConsumer = "count-scheduled"

// scheduled returns the number of schedules in part, creating the
// counting consumer on first use (queues made before it existed have
// none).
func (q *jsQueue) scheduled(ctx context.Context, part *jsPartition) (int64, error) {
	part.countMu.Lock()
	c := part.counter
	if c == nil {
		var err error
		c, err = part.sched.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       counterConsumer,
			Description:   "jetsaga: counts scheduled messages; never pulled",
			FilterSubject: part.n.sSubj + ".*.s",
			AckPolicy:     jetstream.AckNonePolicy,
			DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			part.countMu.Unlock()
			return 0, q.d.mapErr(err)
		}
		part.counter = c
	}
	part.countMu.Unlock()
	info, err := c.Info(ctx)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		part.countMu.Lock()
		part.counter = nil // deleted behind our back: make it again
		part.countMu.Unlock()
		return q.scheduled(ctx, part)
	}
	if err != nil {
		return 0, q.d.mapErr(err)
	}
	return int64(info.NumPending), nil
}
