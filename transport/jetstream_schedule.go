package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetsaga/jetsaga/transport/internal/tries"
)

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
	key := msgKey(m.MessageID)
	msg, err := q.scheduleMsg(part, key, m, at)
	if err != nil {
		return SendResult{}, err
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

// scheduleMsg makes the schedule of m for at in part, on its own subject
// under key (msgKey of its MessageID): the server writes its copy at at.
// A message with a MessageID is guarded (see guard).
func (q *jsQueue) scheduleMsg(part *jsPartition, key string, m *Message, at time.Time) (*nats.Msg, error) {
	sm := *m
	sm.ScheduledAt = at
	msg, _, err := q.natsMsg(part.n.sSubj+"."+key+"."+ScheduleToken, &sm)
	if err != nil {
		return nil, err
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
	return msg, nil
}

// duplicateOf reports a duplicate of the MessageID whose key is key: with
// the number of the scheduled message with it, while one is pending, or
// as cancelled while its cancel record is kept.
func duplicateOf(ctx context.Context, d *jsDriver, part *jsPartition, key string) SendResult {
	raw, err := d.getLast(ctx, part.sched, part.n.sSubj+"."+key+".s")
	if err != nil {
		cancelled, _ := d.lastBySubject(ctx, part.n.sched, part.n.sSubj+"."+key+"."+cancelToken+".*")
		return SendResult{Duplicate: true, Cancelled: cancelled}
	}
	return SendResult{Seq: makeSeq(part.idx, true, raw.Sequence), Duplicate: true}
}

// cancelMargin is how close to its due time a scheduled message counts as
// activated for Cancel on JetStream (see cancel).
const cancelMargin = 500 * time.Millisecond

// cancel stops a pending schedule with one conditional write: a cancel
// record on P.S.N.p.<key>.x.<seq> (written on its .cancel form, see
// cancelToken), accepted only while P.S.N.p.<key>.s
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
	if !ok || kind != ScheduleToken {
		return fmt.Errorf("%w: seq %d is not a scheduled message", ErrNotFound, seq)
	}
	recSubj := part.n.sSubj + "." + key + "." + cancelToken + "." + strconv.FormatUint(local, 10)
	rec := &nats.Msg{Header: nats.Header{}}
	rec.Header.Set(hdrCancelled, "1")
	rec.Header.Set(natsTTL, fmt.Sprintf("%ds", int64(q.cfg.CancelRecordTTL/time.Second)))
	// Which Cancel wrote a record, for a retry after an unanswered try
	// (see tries): the record may be ours.
	rec.Header.Set(hdrCancelID, nuid.Next())
	if raw.Header.Get(natsSchedule) == "" {
		return q.cancelStray(ctx, part, rec, recSubj, local)
	}
	due, dueErr := time.Parse(time.RFC3339Nano, raw.Header.Get(HeaderScheduledAt))
	rec.Header.Set(natsScheduleNext, "purge")
	rec.Header.Set(natsScheduler, raw.Subject)
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
			err := q.d.writeCancelRecord(tctx, rec, recSubj, jetstream.WithExpectLastSequenceForSubject(local, raw.Subject))
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

// writeCancelRecord publishes the cancel record rec, to be stored as
// recSubj: on its written form (see cancelToken), or, on a schedule stream
// as an earlier version provisioned it (an older process reopened the
// queue during a rolling deploy), which listens on the stored form itself
// and refuses the written one, on recSubj.
func (d *jsDriver) writeCancelRecord(ctx context.Context, rec *nats.Msg, recSubj string, opts ...jetstream.PublishOpt) error {
	opts = append(opts, noPubRetry)
	rec.Subject = recSubj + "." + cancelWriteToken
	_, err := d.js.PublishMsg(ctx, rec, opts...)
	if tries.NoResponders(err) && ctx.Err() == nil {
		rec.Subject = recSubj
		_, err = d.js.PublishMsg(ctx, rec, opts...)
	}
	return err
}

// cancelStray cancels what a client stored on a schedule's subject
// without the server's schedule headers (a publish on P.S.N.p.<key>.s
// without Nats-Schedule, which the server stores as it is): it never
// activates, so Cancel removes it, leaving a cancel record like any
// Cancel's, which keeps its MessageID taken and makes a later Cancel of
// the number answer that it was cancelled.
func (q *jsQueue) cancelStray(ctx context.Context, part *jsPartition, rec *nats.Msg, recSubj string, local uint64) error {
	if err := q.d.tries(ctx, func(tctx context.Context) error {
		return q.d.writeCancelRecord(tctx, rec, recSubj)
	}); err != nil {
		return q.d.mapErr(err)
	}
	err := q.d.tries(ctx, func(tctx context.Context) error { return part.sched.DeleteMsg(tctx, local) })
	if isNotFound(err) {
		return nil // removed by a concurrent Cancel
	}
	return q.d.mapErr(err)
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

// activationTick is nats-server's: it activates due message schedules on
// a 250 ms tick (more under load).
func (d *jsDriver) activationTick() time.Duration { return 250 * time.Millisecond }
