package transport

import (
	"bytes"
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/transport/internal/tries"
)

// Bounded tries (see package tries). Every request on the path of Send,
// Schedule, Cancel and Complete is made in bounded tries, and each
// operation makes its retries safe: a retried write is guarded so that
// the server stores it at most once, and a refusal of a retry is told
// apart from a duplicate (see store, cancel and jsSettler.ack).

// tries calls f in bounded tries (see tries.Runner.Do) until the broker
// closes. A context without a deadline gets the broker's API timeout.
func (d *jsDriver) tries(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, stop := d.apiContext(ctx)
	defer stop()
	return d.runner.Do(ctx, d.check, f)
}

// noPubRetry turns off nats.go's own retry of a publish that met no
// responders: tries does it, within its limits.
var noPubRetry = jetstream.WithRetryAttempts(0)

// store publishes msg, a write under part's key, in bounded tries, and
// reports the sequence it was stored under (0 if it is stored but its
// number could not be read back) or that the key already held a message
// (dup). guarded says that msg carries guard's condition (it has a
// MessageID); alt is another subject the message may have moved to once
// stored (a schedule's activation copy), or "".
//
// A try that went unanswered may have been stored. The next tries are
// guarded too (a message without MessageID has a key of its own, so for
// it guard refuses only a message an earlier try stored), and a refusal
// is then resolved by reading what the key holds: a stored message equal
// to msg (same subject, body and Jetsaga headers) is ours, whatever
// wrote it; one still in flight is waited for.
func (q *jsQueue) store(ctx context.Context, part *jsPartition, key string, msg *nats.Msg, guarded bool, alt string) (seq uint64, dup bool, err error) {
	unanswered := false
	err = q.d.tries(ctx, func(tctx context.Context) error {
		if unanswered && !guarded && msg.Header.Get(expectedLastSubjSeqSubj) == "" {
			guard(msg, part, key)
		}
		ack, pubErr := q.d.js.PublishMsg(tctx, msg, noPubRetry)
		if pubErr == nil {
			pubErr = loseAnswer(tctx)
		}
		switch {
		case pubErr == nil:
			seq = ack.Sequence
			return nil
		case isWrongLastSeq(pubErr):
			// The server's answer, also when the try's time ran out as it
			// came: resolved below, never returned as it is.
		case tctx.Err() != nil:
			unanswered = true
			return pubErr
		default:
			return pubErr
		}
		if !unanswered {
			dup = true // refused at the first ask: the key held a message
			return nil
		}
		s, found, err := q.findStored(tctx, part, msg, alt)
		switch {
		case err != nil:
			return err
		case found:
			seq = s
			return nil
		case isInFlight(pubErr):
			return tries.ErrAgain // an earlier try of ours, or another write, not applied yet
		case !guarded:
			return nil // its key is its own: stored, and gone on since
		}
		dup = true
		return nil
	})
	return seq, dup, err
}

// answerLost, set by tests, makes a try that was answered act as one
// whose answer was lost when it returns true: the write took effect, and
// the try waits out its limit.
var answerLost func() bool

// answerErr, set by tests, makes a try that was answered return the
// error it returns instead (not nil): the write took effect, and the try
// reports a failure that is not its time running out.
var answerErr func() error

func loseAnswer(tctx context.Context) error {
	if answerErr != nil {
		if err := answerErr(); err != nil {
			return err
		}
	}
	if answerLost == nil || !answerLost() {
		return nil
	}
	<-tctx.Done()
	return tctx.Err()
}

// isInFlight reports a refusal because a write to the subject is still
// being replicated.
func isInFlight(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// findStored looks for msg as stored on its subject or on alt, and
// returns its sequence (0 when found on alt).
func (q *jsQueue) findStored(ctx context.Context, part *jsPartition, msg *nats.Msg, alt string) (uint64, bool, error) {
	for _, subj := range []string{msg.Subject, alt} {
		if subj == "" {
			continue
		}
		raw, err := part.sched.GetLastMsgForSubject(ctx, subj)
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return 0, false, err
		}
		if sameMessage(raw, msg) {
			if subj != msg.Subject {
				return 0, true, nil
			}
			return raw.Sequence, true, nil
		}
	}
	return 0, false, nil
}

// sameMessage reports whether raw holds msg's body and Jetsaga headers.
func sameMessage(raw *jetstream.RawStreamMsg, msg *nats.Msg) bool {
	if !bytes.Equal(raw.Data, msg.Data) {
		return false
	}
	n := 0
	for k, v := range msg.Header {
		if !strings.HasPrefix(k, "Jetsaga-") {
			continue
		}
		n++
		if got := raw.Header.Values(k); len(got) != len(v) || len(v) > 0 && got[0] != v[0] {
			return false
		}
	}
	for k := range raw.Header {
		if strings.HasPrefix(k, "Jetsaga-") {
			n--
		}
	}
	return n == 0
}

// getMsg and getLast are GetMsg and GetLastMsgForSubject in bounded
// tries; reads are idempotent.
func (d *jsDriver) getMsg(ctx context.Context, s jetstream.Stream, seq uint64) (*jetstream.RawStreamMsg, error) {
	var raw *jetstream.RawStreamMsg
	err := d.tries(ctx, func(tctx context.Context) error {
		var err error
		raw, err = s.GetMsg(tctx, seq)
		return err
	})
	return raw, err
}

func (d *jsDriver) getLast(ctx context.Context, s jetstream.Stream, subject string) (*jetstream.RawStreamMsg, error) {
	var raw *jetstream.RawStreamMsg
	err := d.tries(ctx, func(tctx context.Context) error {
		var err error
		raw, err = s.GetLastMsgForSubject(tctx, subject)
		return err
	})
	return raw, err
}

func (d *jsDriver) streamInfo(ctx context.Context, s jetstream.Stream) (*jetstream.StreamInfo, error) {
	var info *jetstream.StreamInfo
	err := d.tries(ctx, func(tctx context.Context) error {
		var err error
		info, err = s.Info(tctx)
		return err
	})
	return info, err
}

// ack acknowledges the delivery in bounded tries. An ack is idempotent,
// but the server need not answer an ack of a message already
// acknowledged: after an unanswered try, a message gone from a work-queue
// stream counts as acknowledged (only an ack removes it while its lock
// holds).
func (s *jsSettler) ack(ctx context.Context) error {
	unanswered := false
	return s.q.d.tries(ctx, func(tctx context.Context) error {
		if unanswered && !s.part.n.topic {
			if _, err := s.part.queue.GetMsg(tctx, LocalSeq(s.m.Seq)); isNotFound(err) {
				return nil
			}
		}
		err := s.msg.DoubleAck(tctx)
		if err == nil {
			err = loseAnswer(tctx)
		}
		if unanswered && errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return nil // acknowledged meanwhile by this very delivery
		}
		if err != nil && tctx.Err() != nil {
			unanswered = true
		}
		return err
	})
}
