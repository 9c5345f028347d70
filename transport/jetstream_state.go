package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// State records on JetStream: the record under key K of partition p is
// the last message on P.V.N.p.K in the partition's schedule stream,
// written with Nats-Rollup: sub (one message per key) and guarded by
// Nats-Expected-Last-Subject-Sequence; its revision is its stream
// sequence. A commit with schedules is one ADR-50 atomic batch: the
// record first, then each schedule exactly as Schedule writes it, so the
// schedules' sequence numbers follow the record's.

// hdrCommit names the CommitState call that wrote a record, so that a
// retry after an unanswered try can tell its own commit from another's.
const hdrCommit = "Jetsaga-Commit"

func (part *jsPartition) stateSubject(key string) string { return part.n.vSubj + "." + key }

func (q *jsQueue) statePart(p int) (*jsPartition, error) {
	if q.isDLQ || q.topic != nil || q.parts[p].n.vSubj == "" {
		return nil, fmt.Errorf("%w: state on a dead-letter queue or topic", ErrUnsupported)
	}
	if err := q.d.check(); err != nil {
		return nil, err
	}
	return q.parts[p], nil
}

func (q *jsQueue) loadState(ctx context.Context, key string, p int) ([]byte, uint64, error) {
	part, err := q.statePart(p)
	if err != nil {
		return nil, 0, err
	}
	raw, err := q.d.getLast(ctx, part.sched, part.stateSubject(key))
	if isNotFound(err) {
		return nil, 0, fmt.Errorf("%w: %s", ErrStateNotFound, key)
	}
	if err != nil {
		return nil, 0, q.d.mapErr(err)
	}
	return raw.Data, raw.Sequence, nil
}

func (q *jsQueue) commitState(ctx context.Context, c StateCommit, p int) (StateResult, error) {
	part, err := q.statePart(p)
	if err != nil {
		return StateResult{}, err
	}
	rec := &nats.Msg{Subject: part.stateSubject(c.Key), Data: c.Value, Header: nats.Header{}}
	if n, max := len(c.Value)+len(rec.Subject)+256, q.d.maxPayload(); int64(n) > max {
		return StateResult{}, fmt.Errorf("%w: state record of %d bytes, server max_payload is %d", ErrMessageTooLarge, len(c.Value), max)
	}
	rec.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(c.Rev, 10))
	rec.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	rec.Header.Set(hdrCommit, nuid.Next())
	if c.TTL > 0 {
		rec.Header.Set(natsTTL, strconv.FormatInt(int64(c.TTL/time.Second), 10)+"s")
	}
	msgs := []*nats.Msg{rec}
	keys := make([]string, len(c.Schedule))
	for i, m := range c.Schedule {
		keys[i] = msgKey(m.MessageID)
		msg, err := q.scheduleMsg(part, keys[i], m, m.ScheduledAt)
		if err != nil {
			return StateResult{}, err
		}
		msgs = append(msgs, msg)
	}
	result := func(seq uint64) StateResult {
		r := StateResult{Rev: seq}
		for i := range c.Schedule {
			r.Seqs = append(r.Seqs, makeSeq(p, true, seq+1+uint64(i)))
		}
		return r
	}
	var seq uint64
	unanswered := false
	err = q.d.tries(ctx, func(tctx context.Context) error {
		if unanswered {
			// The last try may have been stored: the record tells.
			raw, err := q.d.getLast(tctx, part.sched, rec.Subject)
			switch {
			case err == nil && raw.Header.Get(hdrCommit) == rec.Header.Get(hdrCommit):
				seq = raw.Sequence
				return nil
			case err == nil && raw.Sequence != c.Rev, err != nil && isNotFound(err) && c.Rev != 0:
				return fmt.Errorf("%w: %s", ErrStateConflict, c.Key)
			case err != nil && !isNotFound(err):
				return err
			}
		}
		last, err := q.d.publishAtomic(tctx, msgs)
		if err == nil {
			err = loseAnswer(tctx)
		}
		if err != nil {
			unanswered = unanswered || tctx.Err() != nil
			return err
		}
		seq = last - uint64(len(msgs)-1) // the record is the first of the batch
		return nil
	})
	if err == nil {
		return result(seq), nil
	}
	if errors.Is(err, ErrStateConflict) {
		return StateResult{}, err
	}
	if !isWrongLastSeq(err) {
		return StateResult{}, q.d.mapErr(err)
	}
	seq, err = q.refusal(ctx, part, c, rec, keys, err)
	if err != nil {
		return StateResult{}, err
	}
	return result(seq), nil
}

// refusal tells why the server refused a commit with a wrong-last-sequence
// error, which any of the batch's conditions may have raised: the
// record's revision (ErrStateConflict), or a schedule's MessageID guard
// (ErrDuplicateMessage). A refusal neither explains is a write on one of
// the subjects still being replicated: ErrUnavailable if the server said
// so (its outcome is not known yet; without quorum it stays unknown, and a
// caller that reloaded and retried at once, as on a conflict, would find
// the same record and the same refusal), else a conflict: the caller
// loads the record again and retries. If an unanswered try's commit
// turns out stored (the record carries the commit's own ID), that is
// success: refusal returns the record's revision and no error.
func (q *jsQueue) refusal(ctx context.Context, part *jsPartition, c StateCommit, rec *nats.Msg, keys []string, cause error) (uint64, error) {
	raw, err := q.d.getLast(ctx, part.sched, rec.Subject)
	switch {
	case err != nil && !isNotFound(err):
		return 0, q.d.mapErr(err)
	case err == nil && raw.Header.Get(hdrCommit) == rec.Header.Get(hdrCommit):
		// Refused because an earlier try of this very commit was stored
		// (its answer lost, or its error not one that says so): the
		// commit stands.
		return raw.Sequence, nil
	case err == nil && raw.Sequence != c.Rev, err != nil && c.Rev != 0:
		return 0, fmt.Errorf("%w: %s: %w", ErrStateConflict, c.Key, cause)
	}
	for i, key := range keys {
		if c.Schedule[i].MessageID == "" {
			continue
		}
		found, err := q.d.lastBySubject(ctx, part.n.sched, part.n.sSubj+"."+key+".>")
		if err != nil {
			return 0, err
		}
		if found {
			return 0, fmt.Errorf("%w: message %d (MessageID %.64q): %w", ErrDuplicateMessage, i, c.Schedule[i].MessageID, cause)
		}
	}
	if isInFlight(cause) {
		return 0, q.inFlight(ctx, part, c, rec, cause)
	}
	return 0, fmt.Errorf("%w: %s: %w", ErrStateConflict, c.Key, cause)
}

// inFlight tells what a refusal because an earlier write is not applied
// yet (cause) was, for a commit of c whose record moved on from c.Rev by
// none of its own: a conflict once the record's revision moves on (on a
// healthy cluster, within milliseconds), ErrUnavailable if it stays for
// inFlightWait — a stream without quorum, which never applies it.
func (q *jsQueue) inFlight(ctx context.Context, part *jsPartition, c StateCommit, rec *nats.Msg, cause error) error {
	wctx, cancel := context.WithTimeout(ctx, inFlightWait)
	defer cancel()
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 200*time.Millisecond) {
		raw, err := q.d.getLast(wctx, part.sched, rec.Subject)
		switch {
		case err == nil && raw.Sequence != c.Rev, err != nil && isNotFound(err) && c.Rev != 0:
			return fmt.Errorf("%w: %s: %w", ErrStateConflict, c.Key, cause)
		case err != nil && !isNotFound(err) && wctx.Err() == nil:
			return q.d.mapErr(err)
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("%w: %s: an earlier write is not replicated yet: %w", ErrUnavailable, c.Key, cause)
		case <-time.After(pause):
		}
	}
}

// inFlightWait bounds how long inFlight looks: well beyond a healthy
// cluster's replication, well within a step's time.
const inFlightWait = 2 * time.Second

// publishAtomic stores msgs, all in one stream, all or none, and returns
// the sequence of the last: one publish for one message, else an ADR-50
// atomic batch (nats.go has no API for it yet: the headers are set here).
func (d *jsDriver) publishAtomic(ctx context.Context, msgs []*nats.Msg) (uint64, error) {
	if len(msgs) == 1 {
		ack, err := d.js.PublishMsg(ctx, msgs[0], noPubRetry)
		if err != nil {
			return 0, err
		}
		return ack.Sequence, nil
	}
	id := nuid.Next()
	last := len(msgs) - 1
	for i, m := range msgs {
		m.Header.Set(natsBatchID, id)
		m.Header.Set(natsBatchSeq, strconv.Itoa(i+1))
		if i < last {
			if err := d.nc.PublishMsg(m); err != nil {
				return 0, err
			}
		}
	}
	commit := msgs[last]
	commit.Header.Set(natsBatchCommit, "1")
	defer commit.Header.Del(natsBatchCommit)
	resp, err := d.nc.RequestMsgWithContext(ctx, commit)
	if err != nil {
		return 0, err
	}
	var ack struct {
		Seq   uint64              `json:"seq"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, fmt.Errorf("atomic batch: %w", err)
	}
	if ack.Error != nil {
		return 0, ack.Error
	}
	return ack.Seq, nil
}

// The ADR-50 atomic batch headers.
const (
	natsBatchID     = "Nats-Batch-Id"
	natsBatchSeq    = "Nats-Batch-Sequence"
	natsBatchCommit = "Nats-Batch-Commit"
)

// deleteState deletes the record's message by its sequence: a sequence
// that is not the record's last (the record was written again, and the
// rollup removed it) or that is gone is refused, so the delete is
// conditional on the revision.
func (q *jsQueue) deleteState(ctx context.Context, key string, rev uint64, p int) error {
	part, err := q.statePart(p)
	if err != nil {
		return err
	}
	raw, err := q.d.getLast(ctx, part.sched, part.stateSubject(key))
	switch {
	case isNotFound(err):
		return fmt.Errorf("%w: %s", ErrStateNotFound, key)
	case err != nil:
		return q.d.mapErr(err)
	case raw.Sequence != rev:
		return fmt.Errorf("%w: %s is at revision %d, not %d", ErrStateConflict, key, raw.Sequence, rev)
	}
	err = q.d.tries(ctx, func(tctx context.Context) error {
		err := part.sched.DeleteMsg(tctx, rev)
		if err == nil {
			err = loseAnswer(tctx)
		}
		return err
	})
	if err == nil {
		return nil
	}
	if isNotFound(err) || isSeqNotFound(err) || strings.Contains(err.Error(), "no message found") {
		// Gone: by this delete, whose answer a try lost (the next try finds
		// the sequence deleted), or by another client's. What the record
		// is now tells which the caller must hear.
		raw, lerr := q.d.getLast(ctx, part.sched, part.stateSubject(key))
		switch {
		case isNotFound(lerr):
			return nil // no record: what the delete was for
		case lerr != nil:
			return q.d.mapErr(lerr)
		}
		return fmt.Errorf("%w: %s changed while being deleted (now at revision %d)", ErrStateConflict, key, raw.Sequence)
	}
	return q.d.mapErr(err)
}

// isSeqNotFound reports JetStream's answer to a delete of a sequence the
// stream no longer holds (error 10043, "sequence N not found").
func isSeqNotFound(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsSequenceNotFound
}

// jsSequenceNotFound is JetStream's error code for "sequence not found".
const jsSequenceNotFound jetstream.ErrorCode = 10043

func (q *jsQueue) stateKeys(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for p := range q.parts {
			part, err := q.statePart(p)
			if err != nil {
				yield("", err)
				return
			}
			info, err := part.sched.Info(ctx, jetstream.WithSubjectFilter(part.n.vSubj+".>"))
			if err != nil {
				yield("", q.d.mapErr(err))
				return
			}
			for subj := range info.State.Subjects {
				key := strings.TrimPrefix(subj, part.n.vSubj+".")
				if strings.HasPrefix(key, prefix) && !yield(key, nil) {
					return
				}
			}
		}
	}
}

// stagesStateCommits reports whether cfg's queue has one replica with file
// storage, where nats-server (2.15) stages every atomic batch in a synced
// file of its own.
func (d *jsDriver) stagesStateCommits(cfg QueueConfig) bool {
	return cfg.Replicas <= 1 && !cfg.MemoryStorage
}
