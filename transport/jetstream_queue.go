package transport

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// NATS header names the transport sets or reads.
const (
	natsSchedule       = "Nats-Schedule"
	natsScheduleTarget = "Nats-Schedule-Target"
	natsScheduleNext   = "Nats-Schedule-Next"
	natsScheduler      = "Nats-Scheduler"
	natsTTL            = "Nats-TTL"
	natsStreamSource   = "Nats-Stream-Source"
)

type jsQueue struct {
	d     *jsDriver
	cfg   QueueConfig
	parts []*jsPartition
	dlq   *jsQueue
	isDLQ bool

	mu       sync.Mutex
	sessions map[string]jetstream.Consumer
}

func (q *jsQueue) deadLetter() queueDriver { return q.dlq }

// targetSuffix is the subject tail a message is stored under: ".m", or
// ".s.<token>" for a session message.
func (q *jsQueue) targetSuffix(m *Message) string {
	if q.cfg.RequiresSession {
		return ".s." + subjectToken(m.SessionID)
	}
	return ".m"
}

// natsMsg encodes m for subject, with its MessageID as Nats-Msg-Id for
// duplicate detection, and refuses it if it cannot fit max_payload.
func (q *jsQueue) natsMsg(subject string, m *Message) (*nats.Msg, error) {
	msg := &nats.Msg{Subject: subject, Header: encodeHeader(m), Data: m.Body}
	if n, max := sizeWith(msg.Header, m.Body), q.d.maxPayload(); int64(n) > max {
		return nil, fmt.Errorf("%w: %d bytes, server max_payload is %d", ErrMessageTooLarge, n, max)
	}
	if m.MessageID != "" {
		msg.Header.Set(jetstream.MsgIDHeader, escapeValue(m.MessageID))
	}
	return msg, nil
}

func (q *jsQueue) send(ctx context.Context, m *Message, p int) (SendResult, error) {
	if q.isDLQ {
		return SendResult{}, fmt.Errorf("%w: send to a dead-letter queue", ErrUnsupported)
	}
	if err := q.d.check(); err != nil {
		return SendResult{}, err
	}
	part := q.parts[p]
	msg, err := q.natsMsg(part.n.qSubj+q.targetSuffix(m), m)
	if err != nil {
		return SendResult{}, err
	}
	ack, err := q.d.js.PublishMsg(ctx, msg)
	if err != nil {
		return SendResult{}, q.d.mapErr(err)
	}
	return SendResult{Seq: makeSeq(p, false, ack.Sequence), Duplicate: ack.Duplicate}, nil
}

// schedule publishes m on its own schedule subject in the partition's
// schedule stream. The server activates it at `at` by writing a copy to
// the activation subject, which the queue stream sources: that copy gets
// the queue's next sequence number and the activation time.
func (q *jsQueue) schedule(ctx context.Context, m *Message, p int, at time.Time) (SendResult, error) {
	if q.isDLQ {
		return SendResult{}, fmt.Errorf("%w: schedule on a dead-letter queue", ErrUnsupported)
	}
	if err := q.d.check(); err != nil {
		return SendResult{}, err
	}
	part := q.parts[p]
	sm := *m
	sm.ScheduledAt = at
	msg, err := q.natsMsg(part.n.sSubj+".s."+nuid.Next(), &sm)
	if err != nil {
		return SendResult{}, err
	}
	// RFC3339Nano: jetstream.WithScheduleAt rounds to whole seconds, which
	// would fire up to a second early.
	msg.Header.Set(natsSchedule, "@at "+msg.Header.Get(hdrScheduledAt))
	msg.Header.Set(natsScheduleTarget, part.n.sSubj+".f"+q.targetSuffix(m))
	ack, err := q.d.js.PublishMsg(ctx, msg)
	if err != nil {
		return SendResult{}, q.d.mapErr(err)
	}
	return SendResult{Seq: makeSeq(p, true, ack.Sequence), Duplicate: ack.Duplicate}, nil
}

// cancelMargin is how close to its due time a scheduled message counts as
// activated for Cancel on JetStream (see cancel).
const cancelMargin = 500 * time.Millisecond

// cancel stops a pending schedule with one conditional write: a cancel
// record on <sSubj>.x.<id>, accepted only while <sSubj>.s.<id> still holds
// the schedule, which it purges in the same step (Nats-Schedule-Next:
// purge). The server's scheduler may already have read the schedule when
// the record lands and still write the activation, but only once the
// message is due: so a message due within cancelMargin is reported as
// activated rather than cancelled. Should a cancel record still land
// after the due time (a request delayed, or a client clock behind the
// server's, by more than the margin), a receiver drops the activation
// (see dropCancelled): a nil result always means "never delivered", at
// the price of one unused active sequence number in that case.
func (q *jsQueue) cancel(ctx context.Context, seq uint64) error {
	if q.isDLQ {
		return fmt.Errorf("%w: cancel on a dead-letter queue", ErrUnsupported)
	}
	if err := q.d.check(); err != nil {
		return err
	}
	part, local := q.parts[Partition(seq)], LocalSeq(seq)
	raw, err := part.sched.GetMsg(ctx, local)
	if isNotFound(err) {
		return fmt.Errorf("%w: seq %d", ErrNotFound, seq)
	}
	if err != nil {
		return q.d.mapErr(err)
	}
	id, ok := strings.CutPrefix(raw.Subject, part.n.sSubj+".s.")
	if !ok || raw.Header.Get(natsSchedule) == "" {
		return fmt.Errorf("%w: seq %d is not a scheduled message", ErrNotFound, seq)
	}
	// The server's scheduler may already be activating a message this
	// close to its time; cancelling it then could only be honoured by
	// dropping the activation, which would skip an active sequence number.
	// It counts as activated instead: it will be delivered.
	if due, err := time.Parse(time.RFC3339Nano, raw.Header.Get(hdrScheduledAt)); err == nil && time.Until(due) < cancelMargin {
		return fmt.Errorf("%w: seq %d is due at %s, within %v", ErrAlreadyActivated, seq, due.Format(time.RFC3339Nano), cancelMargin)
	}
	rec := &nats.Msg{Subject: part.n.sSubj + ".x." + id, Header: nats.Header{}}
	rec.Header.Set(hdrCancelled, "1")
	rec.Header.Set(natsScheduleNext, "purge")
	rec.Header.Set(natsScheduler, raw.Subject)
	rec.Header.Set(natsTTL, fmt.Sprintf("%ds", int64(q.cfg.CancelRecordTTL/time.Second)))
	_, err = q.d.js.PublishMsg(ctx, rec, jetstream.WithExpectLastSequenceForSubject(local, raw.Subject))
	if err == nil {
		return nil
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence &&
		apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant {
		return q.d.mapErr(err)
	}
	// The schedule is gone: activated, or cancelled by a racing Cancel.
	if _, err := part.sched.GetLastMsgForSubject(ctx, rec.Subject); err == nil {
		return fmt.Errorf("%w: seq %d was cancelled concurrently", ErrNotFound, seq)
	} else if !isNotFound(err) {
		return q.d.mapErr(err)
	}
	return fmt.Errorf("%w: seq %d", ErrAlreadyActivated, seq)
}

func isNotFound(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrMsgNotFound) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeMessageNotFound
}

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
				stream, filter = part.sched, part.n.sSubj+".s.*"
			}
			for len(out) < max {
				raw, err := stream.GetMsg(ctx, start, jetstream.WithGetMsgSubject(filter))
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
