package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsMsg encodes m for subject and returns it with its size, refusing it
// if it cannot fit max_payload.
func (q *jsQueue) natsMsg(subject string, m *Message) (*nats.Msg, int, error) {
	msg := &nats.Msg{Subject: subject, Header: encodeHeader(m), Data: m.Body}
	n, max := sizeWith(msg.Header, m.Body), q.d.maxPayload()
	if int64(n) > max {
		return nil, 0, fmt.Errorf("%w: %d bytes, server max_payload is %d", ErrMessageTooLarge, n, max)
	}
	return msg, n, nil
}

// guard makes the server store msg only if no subject under
// P.S.N.p.<key>. holds a message: no schedule pending with this MessageID,
// no record of its cancellation, and no copy of a message with it sent or
// activated within the duplicate window. The check reads stored messages,
// not the server's in-memory Nats-Msg-Id table, so it holds across server
// restarts and, on replicated streams, leader changes. A refusal is a
// "wrong last sequence" error (isWrongLastSeq).
func guard(msg *nats.Msg, part *jsPartition, key string) {
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	msg.Header.Set(expectedLastSubjSeqSubj, part.n.sSubj+"."+key+".>")
}

const expectedLastSubjSeqSubj = "Nats-Expected-Last-Subject-Sequence-Subject"

// isWrongLastSeq reports whether err is the server's refusal of a write
// whose expected-last-subject-sequence condition failed: a duplicate for
// a guarded send or schedule, a schedule already gone for a cancel record.
func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// send writes m's copy to the schedule stream, from which the queue stream
// sources it at once; that copy gets the queue's next sequence number.
// The active sequence number is therefore not known here: SendResult.Seq
// is 0, as in Service Bus, whose send returns none.
func (q *jsQueue) send(ctx context.Context, m *Message, p int) (SendResult, error) {
	if q.isDLQ {
		return SendResult{}, fmt.Errorf("%w: send to a dead-letter queue", ErrUnsupported)
	}
	if err := q.d.check(); err != nil {
		return SendResult{}, err
	}
	part := q.parts[p]
	key := msgKey(m.MessageID)
	msg, size, err := q.natsMsg(q.copySubject(part, key, m), m)
	if err != nil {
		return SendResult{}, err
	}
	stored := part.copySize(msg.Subject, size)
	if err := q.checkFull(ctx, part, stored); err != nil {
		return SendResult{}, err
	}
	if m.MessageID != "" {
		guard(msg, part, key)
	}
	if q.topic != nil {
		msg.Header.Set(natsTTL, q.topic.copyTTL) // see jsTopicShape
	}
	seq, dup, err := q.store(ctx, part, key, msg, m.MessageID != "", "")
	// An error leaves the outcome unknown: the copy counts as stored (on
	// the safe side) until the next read of the size.
	q.sent(part, stored, seq, !dup)
	if err != nil {
		return SendResult{}, q.d.mapErr(err)
	}
	if dup {
		return duplicateOf(ctx, q.d, part, key), nil
	}
	// The next receive brings it (see pull.Puller.Expecting).
	raise(&part.sent, seq)
	return SendResult{}, nil
}

// sizeStale is how old the queue stream's size may be when Send checks
// MaxBytes; sends of this broker since the read are added to it. A
// variable for tests (see SetSizeStale).
var sizeStale = 100 * time.Millisecond

// copySize estimates, on the high side, what a copy of wire bytes
// (headers and body) sent on subject subj takes in the queue stream: the
// message, its record (subject, sequence, time, checksum: 128 bytes with
// the header's name and separators), and the Nats-Stream-Source header
// that sourcing adds, which names the schedule stream, the sequence, the
// source's subject filters and transforms and the original subject (about
// 350 bytes on a queue).
func (part *jsPartition) copySize(subj string, wire int) uint64 {
	n := wire + 128 + 2*len(subj) + len(part.n.sched)
	for _, src := range part.queue.CachedInfo().Config.Sources {
		for _, tr := range src.SubjectTransforms {
			n += len(tr.Source) + len(tr.Destination)
		}
	}
	return uint64(n)
}

// unsourcedKeep is how long a copy this broker sent counts as not yet
// sourced when no read of the queue stream says otherwise (a read that
// reports no source sequence).
const unsourcedKeep = time.Minute

// checkFull refuses a message that would take the partition's active
// messages past MaxBytes. The size counted is the queue stream's, as read
// at most sizeStale ago (read again before any refusal), plus every copy this broker has sent that the
// queue stream had not sourced yet by then: a copy lands in the schedule
// stream first and reaches the queue stream a moment later (later still
// on a replicated stream, where each sourced copy is a proposal of its
// own), so the stream's size alone lags behind what was accepted. The
// read takes the sourced sequence first and the size after it, so that
// the size holds everything up to that sequence. With one broker sending,
// what Send accepts therefore never exceeds MaxBytes; brokers do not see
// each other's unsourced copies, so with several the cap can be passed by
// what the others accepted within sizeStale and their sourcing lag. The
// queue stream enforces the cap itself as well: what passes this check
// while the partition is full waits in the schedule stream until space
// frees, and is never dropped.
func (q *jsQueue) checkFull(ctx context.Context, part *jsPartition, n uint64) error {
	if q.cfg.MaxBytes <= 0 {
		return nil
	}
	part.sizeMu.Lock()
	defer part.sizeMu.Unlock()
	over := func() bool { return part.size+part.sending+n > uint64(q.cfg.MaxBytes) }
	// A size up to sizeStale old may let a send through, never refuse
	// one: the partition may have been drained since, so a refusal is
	// always decided on a fresh read.
	if time.Since(part.sizeRead) > sizeStale || over() {
		if err := q.readSize(ctx, part); err != nil {
			return q.d.mapErr(err)
		}
	}
	if over() {
		return fmt.Errorf("%w: queue %s partition %d: MaxBytes %d reached", ErrQueueFull, q.cfg.Name, part.idx, q.cfg.MaxBytes)
	}
	part.sending += n // until sent (see sent)
	return nil
}

// sent settles what checkFull reserved for a copy of n bytes: the copy
// stored under seq counts until a read shows it sourced; a send that
// stored nothing (stored false) frees its reservation.
func (q *jsQueue) sent(part *jsPartition, n uint64, seq uint64, stored bool) {
	if q.cfg.MaxBytes <= 0 {
		return
	}
	c := sentCopy{seq: seq, size: n, at: time.Now()}
	part.sizeMu.Lock()
	defer part.sizeMu.Unlock()
	part.sending -= c.size
	if stored {
		part.size += c.size
		part.unsourced = append(part.unsourced, c)
	}
}

// readSize reads the queue stream's size and adds this broker's copies
// that it had not sourced yet. part.sizeMu held.
func (q *jsQueue) readSize(ctx context.Context, part *jsPartition) error {
	first, err := q.d.streamInfo(ctx, part.queue)
	if err != nil {
		return err
	}
	var sourced uint64 // the last schedule-stream sequence the queue stream holds
	for _, si := range first.Sources {
		if si != nil && si.Name == part.n.sched {
			sourced = si.Seq
		}
	}
	// The server reads a stream's state before its sources: a copy stored
	// in between would count as sourced without its bytes. A second read
	// has them all.
	info, err := q.d.streamInfo(ctx, part.queue)
	if err != nil {
		return err
	}
	now := time.Now()
	size := info.State.Bytes
	keep := part.unsourced[:0]
	for _, c := range part.unsourced {
		if c.seq > sourced && now.Sub(c.at) < unsourcedKeep {
			keep = append(keep, c)
			size += c.size
		}
	}
	clear(part.unsourced[len(keep):])
	part.unsourced = keep
	part.size, part.sizeRead = size, now
	return nil
}

// sentCopy is a copy Send wrote to the schedule stream: its sequence
// there (0 if not known), its size, and when it was written.
type sentCopy struct {
	seq  uint64
	size uint64
	at   time.Time
}
