package transport

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	natsScheduleTTL    = "Nats-Schedule-TTL"
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
	pullers  map[*jsPartition]*puller // see puller

	lastPullWarn   atomic.Int64 // unix nanos of the last "pull failed" log
	lastLookupWarn atomic.Int64 // unix nanos of the last "cancel record lookup failed" log

	// lookupFault, when set (by tests), fails cancel record lookups with
	// the error it returns.
	lookupFault func() error

	// topic is set on a topic and its subscriptions (jetstream_topic.go).
	topic *jsTopicShape
}

func (q *jsQueue) deadLetter() queueDriver { return q.dlq }

// targetSuffix is the subject tail a message is stored under: ".m", or
// ".s.<token>" for a session message.
func (q *jsQueue) targetSuffix(m *Message) string {
	if q.topic != nil {
		return q.topic.suffix(m)
	}
	if q.cfg.RequiresSession {
		return ".s." + subjectToken(m.SessionID)
	}
	return ".m"
}

// msgKey returns the subject token of a message in the schedule stream:
// a hash of its MessageID, so that every trace of one MessageID shares a
// subject prefix, or a fresh NUID for a message without one.
func msgKey(id string) string {
	if id == "" {
		return nuid.Next()
	}
	h := sha256.Sum256([]byte(id))
	return "_" + base64.RawURLEncoding.EncodeToString(h[:16])
}

// copySubject is the subject of the copy of m that the queue stream
// sources: an immediate send, or the activation of a schedule.
func (q *jsQueue) copySubject(part *jsPartition, key string, m *Message) string {
	kind := KindWithoutID
	if m.MessageID != "" {
		kind = KindWithID
	}
	return part.n.sSubj + "." + key + "." + kind + q.targetSuffix(m)
}

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
	return SendResult{}, nil
}

// sizeStale is how old the queue stream's size may be when Send checks
// MaxBytes; sends of this broker since the read are added to it.
const sizeStale = 100 * time.Millisecond

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
// at most sizeStale ago, plus every copy this broker has sent that the
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
	if time.Since(part.sizeRead) > sizeStale {
		if err := q.readSize(ctx, part); err != nil {
			return q.d.mapErr(err)
		}
	}
	if part.size+part.sending+n > uint64(q.cfg.MaxBytes) {
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

// schedule publishes m on its own schedule subject in the partition's
// schedule stream. The server activates it at `at` by writing its copy,
// which the queue stream sources: that copy gets the queue's next
// sequence number and the activation time.
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
	key := msgKey(m.MessageID)
	schedSubj := part.n.sSubj + "." + key + ".s"
	msg, _, err := q.natsMsg(schedSubj, &sm)
	if err != nil {
		return SendResult{}, err
	}
	// RFC3339Nano: jetstream.WithScheduleAt rounds to whole seconds, which
	// would fire up to a second early.
	msg.Header.Set(natsSchedule, "@at "+msg.Header.Get(HeaderScheduledAt))
	msg.Header.Set(natsScheduleTarget, q.copySubject(part, key, m))
	if m.MessageID != "" {
		guard(msg, part, key)
	}
	if q.topic != nil {
		msg.Header.Set(natsScheduleTTL, q.topic.copyTTL)
	}
	seq, dup, err := q.store(ctx, part, key, msg, m.MessageID != "", q.copySubject(part, key, m))
	if err != nil {
		return SendResult{}, q.d.mapErr(err)
	}
	if dup {
		return duplicateOf(ctx, q.d, part, key), nil
	}
	if seq == 0 {
		// Stored by a try whose answer was lost, and activated before a
		// retry could read its number back (it was due within a second
		// or two): it is delivered, and no Cancel could stop it now.
		return SendResult{}, nil
	}
	return SendResult{Seq: makeSeq(p, true, seq)}, nil
}

// duplicateOf reports a duplicate of the MessageID whose key is key: with
// the number of the scheduled message with it, while one is pending.
func duplicateOf(ctx context.Context, d *jsDriver, part *jsPartition, key string) SendResult {
	raw, err := d.getLast(ctx, part.sched, part.n.sSubj+"."+key+".s")
	if err != nil {
		return SendResult{Duplicate: true}
	}
	return SendResult{Seq: makeSeq(part.idx, true, raw.Sequence), Duplicate: true}
}

// cancelMargin is how close to its due time a scheduled message counts as
// activated for Cancel on JetStream (see cancel).
const cancelMargin = 500 * time.Millisecond

// cancel stops a pending schedule with one conditional write: a cancel
// record on P.S.N.p.<key>.x.<seq>, accepted only while P.S.N.p.<key>.s
// still holds the schedule, which it purges in the same step
// (Nats-Schedule-Next: purge). The server's scheduler may already have
// read the schedule when the record lands and still write the activation,
// but only once the message is due: so a message due within cancelMargin
// is reported as activated rather than cancelled. Should a cancel record
// still land after the due time (a request delayed, or a client clock
// behind the server's, by more than the margin), a receiver drops the
// activation (see dropCancelled): a nil result always means "never
// delivered", at the price of one unused active sequence number then.
//
// A schedule no longer stored was cancelled (its cancel record, kept for
// CancelRecordTTL, says so) or activated: a number the stream issued with
// no cancel record activated.
func (q *jsQueue) cancel(ctx context.Context, seq uint64) error {
	if q.isDLQ {
		return fmt.Errorf("%w: cancel on a dead-letter queue", ErrUnsupported)
	}
	if err := q.d.check(); err != nil {
		return err
	}
	part, local := q.parts[Partition(seq)], LocalSeq(seq)
	if local == 0 {
		return fmt.Errorf("%w: seq %d", ErrNotFound, seq)
	}
	raw, err := q.d.getMsg(ctx, part.sched, local)
	if isNotFound(err) {
		return q.cancelledOrActivated(ctx, part, seq)
	}
	if err != nil {
		return q.d.mapErr(err)
	}
	rest, ok := strings.CutPrefix(raw.Subject, part.n.sSubj+".")
	key, kind, _ := strings.Cut(rest, ".")
	if !ok || kind != "s" || raw.Header.Get(natsSchedule) == "" {
		return fmt.Errorf("%w: seq %d is not a scheduled message", ErrNotFound, seq)
	}
	due, dueErr := time.Parse(time.RFC3339Nano, raw.Header.Get(HeaderScheduledAt))
	recSubj := part.n.sSubj + "." + key + "." + cancelToken + "." + strconv.FormatUint(local, 10)
	rec := &nats.Msg{Subject: recSubj, Header: nats.Header{}}
	rec.Header.Set(hdrCancelled, "1")
	rec.Header.Set(natsScheduleNext, "purge")
	rec.Header.Set(natsScheduler, raw.Subject)
	rec.Header.Set(natsTTL, fmt.Sprintf("%ds", int64(q.cfg.CancelRecordTTL/time.Second)))
	// Which Cancel wrote a record, for a retry after an unanswered try
	// (see tries): the record may be ours.
	rec.Header.Set(hdrCancelID, nuid.Next())
	unanswered := false // a try went unanswered: our record may be stored, or in flight
	backoff := time.Millisecond
	for {
		// The server's scheduler may already be activating a message this
		// close to its time; cancelling it then could only be honoured by
		// dropping the activation, which would skip an active sequence
		// number. It counts as activated instead: it will be delivered.
		// Not once a try went unanswered: our record may land yet, and
		// only the records can tell then.
		if dueErr == nil && time.Until(due) < cancelMargin && !unanswered {
			return fmt.Errorf("%w: seq %d is due at %s, within %v", ErrAlreadyActivated, seq, due.Format(time.RFC3339Nano), cancelMargin)
		}
		err = q.d.tries(ctx, func(tctx context.Context) error {
			_, err := q.d.js.PublishMsg(tctx, rec, jetstream.WithExpectLastSequenceForSubject(local, raw.Subject), noPubRetry)
			if err == nil {
				err = loseAnswer(tctx)
			}
			if err != nil && tctx.Err() != nil {
				unanswered = true
			}
			return err
		})
		if err == nil {
			return nil
		}
		if !isWrongLastSeq(err) {
			return q.d.mapErr(err)
		}
		// The schedule is gone, or going: activated, or cancelled by a
		// racing Cancel. On a replicated stream the leader refuses our
		// write while one on the same subject is still in flight, so
		// that one may not be readable yet (and may yet fail). Whatever
		// removes the schedule — a cancel record, or the activation's
		// copy — is stored in the same step as the removal: so once the
		// schedule is gone, what removed it is readable. Read in that
		// order, schedule first; while it is still stored, try again.
		if _, err := q.d.getMsg(ctx, part.sched, local); err == nil {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(backoff):
				backoff = min(2*backoff, 50*time.Millisecond)
			}
			continue
		} else if !isNotFound(err) {
			return q.d.mapErr(err)
		}
		if r, err := q.d.getLast(ctx, part.sched, recSubj); err == nil {
			if unanswered && r.Header.Get(hdrCancelID) == rec.Header.Get(hdrCancelID) {
				return nil // our record, stored by a try whose answer was lost
			}
			return fmt.Errorf("%w: seq %d was cancelled concurrently", ErrNotFound, seq)
		} else if !isNotFound(err) {
			return q.d.mapErr(err)
		}
		return fmt.Errorf("%w: seq %d", ErrAlreadyActivated, seq)
	}
}

// cancelledOrActivated tells what became of a scheduled sequence number
// that is no longer stored: cancelled if its cancel record is kept,
// activated if the schedule stream issued it, else never a message.
func (q *jsQueue) cancelledOrActivated(ctx context.Context, part *jsPartition, seq uint64) error {
	local := LocalSeq(seq)
	found, err := q.d.lastBySubject(ctx, part.n.sched, part.n.sSubj+".*."+cancelToken+"."+strconv.FormatUint(local, 10))
	if err != nil {
		return err
	}
	if found {
		return fmt.Errorf("%w: seq %d was cancelled", ErrNotFound, seq)
	}
	info, err := q.d.streamInfo(ctx, part.sched)
	if err != nil {
		return q.d.mapErr(err)
	}
	if local > info.State.LastSeq {
		return fmt.Errorf("%w: seq %d", ErrNotFound, seq)
	}
	return fmt.Errorf("%w: seq %d is no longer scheduled and was not cancelled", ErrAlreadyActivated, seq)
}

// lastBySubject reports whether stream holds a message on subject, which
// may hold wildcards (which direct gets do not take).
func (d *jsDriver) lastBySubject(ctx context.Context, stream, subject string) (bool, error) {
	req, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{subject})
	if err != nil {
		return false, err
	}
	ctx, cancel := d.apiContext(ctx)
	defer cancel()
	found := false
	err = d.tries(ctx, func(tctx context.Context) error {
		resp, err := d.nc.RequestWithContext(tctx, "$JS.API.STREAM.MSG.GET."+stream, req)
		if err != nil {
			return err
		}
		var r struct {
			Error *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(resp.Data, &r); err != nil {
			return fmt.Errorf("message get: %w", err)
		}
		switch {
		case r.Error == nil:
			found = true
			return nil
		case r.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
			return nil
		}
		return r.Error
	})
	return found, d.mapErr(err)
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
				stream, filter = part.sched, part.n.sSubj+".*.s"
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
