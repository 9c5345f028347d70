package timeout

import (
	"context"
	"iter"
	"strconv"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// Timeouts activated early and not yet due.
//
// With early activation a timeout's message leaves the scheduled log of
// its queue up to the engine's lead before its due time, and a receiver
// holds it until then. It is still pending for whoever lists timeouts, so
// listings read it where it is: among the queue's active messages (locked
// by the receiver that holds it, or waiting for one). They are found
// without reading the queue's backlog: such a message was enqueued at its
// ScheduledAt (due − lead) or later, and its due time is in the future,
// so it was enqueued within the last lead. Each partition's active log is
// in enqueue order, so a binary search on sequence numbers (one Peek per
// step) finds where that tail starts.

// activatingSlack widens the tail read beyond the lead: room for
// enqueue times stamped a little before the schedule's time (a sourced
// copy, a server clock stepped back).
const activatingSlack = time.Second

// Activating lists the timeouts on queue q, of every queue engine,
// that were activated early and are not due yet at now: active messages
// marked as timeouts (PropertyTimeout) whose due time (PropertyDue) is
// after both now and their ScheduledAt. A receiver holds each until its
// due time (as the saga dispatcher does) or has not received it yet. lead
// is the longest early activation to look for: the engines' (see
// Queue.EarlyActivation), or MaxEarlyActivation when they are not
// known.
//
// Each Pending has Activating set, Seq set to the active message's
// sequence number, and a Ref (engine:queue:0@due) that Cancel answers
// with ErrAlreadyFired. The cost is bounded by what was enqueued on q in
// the last lead plus a second, plus a binary search per partition (about
// 2·log2 of its backlog peeks of one message), whatever the queue's
// backlog.
func Activating(ctx context.Context, q *transport.Queue, lead time.Duration, now time.Time) iter.Seq2[Pending, error] {
	return func(yield func(Pending, error) bool) {
		for part := range q.Config().Partitions {
			for p, err := range activating(ctx, q, part, lead, now) {
				if !yield(p, err) || err != nil {
					return
				}
			}
		}
	}
}

// activating is Activating for partition part of q.
func activating(ctx context.Context, q *transport.Queue, part int, lead time.Duration, now time.Time) iter.Seq2[Pending, error] {
	return func(yield func(Pending, error) bool) {
		if lead <= 0 {
			return
		}
		from, err := tailStart(ctx, q, part, now.Add(-min(lead, MaxEarlyActivation)-activatingSlack))
		if err != nil || from == 0 {
			if err != nil {
				yield(Pending{}, err)
			}
			return
		}
		for m, err := range q.Browse(ctx, partitionSeq(part, false, from)) {
			if err != nil {
				yield(Pending{}, err)
				return
			}
			if transport.Partition(m.Seq) != part || m.State != transport.Active {
				return
			}
			engine := m.Properties[PropertyTimeout]
			due, err := time.Parse(time.RFC3339Nano, m.Properties[PropertyDue])
			if engine == "" || err != nil || !due.After(now) || m.ScheduledAt.IsZero() || !due.After(m.ScheduledAt) {
				continue // not a timeout, due already, or not activated early
			}
			if engine == "1" {
				engine = QueueEngine
			}
			p := pendingOf(q.Name(), engine, m, 0, due)
			p.Seq, p.Activating = m.Seq, true
			if !yield(p, nil) {
				return
			}
		}
	}
}

// tailStart returns the local sequence number from which partition part
// of q holds only active messages enqueued at or after since: the first
// such message's, or the one after the last message's; 0 if the
// partition holds no active message.
func tailStart(ctx context.Context, q *transport.Queue, part int, since time.Time) (uint64, error) {
	m, err := firstActive(ctx, q, part, 1)
	if err != nil || m == nil {
		return 0, err
	}
	if !m.EnqueuedAt.Before(since) {
		return transport.LocalSeq(m.Seq), nil
	}
	// lo: a message enqueued before since; every message at or after hi
	// is enqueued at or after since. Gallop to find hi, then bisect.
	lo, hi := transport.LocalSeq(m.Seq), uint64(0)
	for step := uint64(1); hi == 0; step *= 2 {
		if m, err = firstActive(ctx, q, part, lo+step); err != nil {
			return 0, err
		}
		if m == nil || !m.EnqueuedAt.Before(since) {
			hi = lo + step
		} else {
			lo = transport.LocalSeq(m.Seq)
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if m, err = firstActive(ctx, q, part, mid); err != nil {
			return 0, err
		}
		if m == nil || !m.EnqueuedAt.Before(since) {
			hi = mid
		} else {
			lo = transport.LocalSeq(m.Seq)
		}
	}
	return hi, nil
}

// firstActive returns the first active message of partition part with a
// local sequence number at or above from, or nil.
func firstActive(ctx context.Context, q *transport.Queue, part int, from uint64) (*transport.Message, error) {
	ms, err := q.Peek(ctx, partitionSeq(part, false, from), 1)
	if err != nil || len(ms) == 0 {
		return nil, err
	}
	if m := ms[0]; transport.Partition(m.Seq) == part && m.State == transport.Active {
		return m, nil
	}
	return nil, nil
}

// partitionSeq is the sequence number local in partition part's active
// or scheduled log.
func partitionSeq(part int, scheduled bool, local uint64) uint64 {
	s := uint64(part)<<transport.PartitionShift | local
	if scheduled {
		s |= transport.ScheduledBit
	}
	return s
}

// dueOf returns the due time a timeout's message carries (PropertyDue),
// else its ScheduledAt.
func dueOf(m *transport.Message) time.Time {
	if due, err := time.Parse(time.RFC3339Nano, m.Properties[PropertyDue]); err == nil {
		return due
	}
	return m.ScheduledAt
}

// pendingOf describes the timeout message m on queue of engine engine:
// its ref names scheduled sequence number seq (0 once activated).
func pendingOf(queue, engine string, m *transport.Message, seq uint64, due time.Time) Pending {
	return Pending{
		Ref:   Ref(engine + ":" + queue + ":" + strconv.FormatUint(seq, 10) + "@" + strconv.FormatInt(due.UnixNano(), 10)),
		ID:    m.MessageID,
		Queue: queue, Saga: m.Properties[PropertySaga], Instance: m.Properties[PropertyInstance],
		At: due, Properties: m.Properties, Seq: seq,
	}
}
