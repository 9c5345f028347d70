package transport

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bounded tries. On a cluster a JetStream request can go unanswered: one
// that reaches a stream while it elects a leader (after a stepdown, or
// when its leader died) is dropped by every replica, and nats-server
// sends no error for it; a publish can even be stored by the new leader
// and still get no answer. Waiting for the answer would hold the caller
// for its whole deadline. So every request on the path of Send,
// Schedule, Cancel and Complete is one try of at most tryLimit (doubling
// with each try, up to maxTryLimit); an unanswered try, or an answer
// saying that the stream has no leader yet, is asked again until the
// caller's context ends. Each operation makes its retries safe: a retried
// write is guarded so that the server stores it at most once, and a
// refusal of a retry is told apart from a duplicate (see store, cancel
// and jsSettler.ack).
const (
	tryLimit    = 250 * time.Millisecond
	maxTryLimit = 2 * time.Second
	// tryBackoff is the wait before asking again after a quick answer
	// saying "no leader" (it grows with each try, up to 8 times).
	tryBackoff = 20 * time.Millisecond
)

// firstTryLimit is the limit of an operation's first try: tryLimit, or
// four times the recent answer time when the server answers slowly (a
// loaded machine), so that slow answers are waited for rather than asked
// for again, which would only load the server more. Up to maxTryLimit.
func (d *jsDriver) firstTryLimit() time.Duration {
	return min(max(tryLimit, 4*time.Duration(d.answerTime.Load())), maxTryLimit)
}

// noteAnswer folds the time an answered try took into the recent answer
// time (an exponentially weighted average, weight 1/8).
func (d *jsDriver) noteAnswer(took time.Duration) {
	for {
		old := d.answerTime.Load()
		next := old + (int64(took)-old)/8
		if d.answerTime.CompareAndSwap(old, next) {
			return
		}
	}
}

// errAgain asks tries for another try: the outcome of an earlier one is
// not settled yet.
var errAgain = errors.New("transport: outcome not settled yet; asking again")

// tries calls f with a context bounded by the current try limit until f
// returns nil or an error that asking again cannot change, or ctx ends.
// f learns whether an earlier try went unanswered from its own state.
// A context without a deadline gets the broker's API timeout.
func (d *jsDriver) tries(ctx context.Context, f func(ctx context.Context) error) error {
	ctx, stop := d.apiContext(ctx)
	defer stop()
	limit := d.firstTryLimit()
	var noResponders time.Time // since when requests have met no responders
	for try := 0; ; try++ {
		tctx, cancel := context.WithTimeout(ctx, limit)
		began := time.Now()
		err := f(tctx)
		unanswered := err != nil && tctx.Err() != nil
		cancel()
		if !unanswered {
			d.noteAnswer(time.Since(began))
		}
		if err == nil || ctx.Err() != nil || d.check() != nil || !unanswered && !transient(err) {
			return err
		}
		if isNoResponders(err) {
			// As during an election; but also what a deleted stream
			// answers, so not for long.
			if noResponders.IsZero() {
				noResponders = time.Now()
			} else if time.Since(noResponders) > noRespondersPatience {
				return err
			}
		}
		if !unanswered {
			select {
			case <-ctx.Done():
				return err
			case <-time.After(tryBackoff << min(try, 3)):
			}
		}
		limit = min(2*limit, maxTryLimit)
	}
}

// noRespondersPatience is how long tries asks again while requests meet
// no responders.
const noRespondersPatience = 2 * time.Second

func isNoResponders(err error) bool {
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// transient reports whether err says only that the stream (or consumer)
// cannot answer yet: no leader, no responders.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, errAgain) || isNoResponders(err) || errors.Is(err, nats.ErrTimeout) ||
		errors.As(err, &apiErr) && (apiErr.ErrorCode == jsErrClusterNotAvail || apiErr.ErrorCode == jsErrClusterNotLeader)
}

// nats-server's error codes for "JetStream system temporarily
// unavailable" (no leader known) and "not leader".
const (
	jsErrClusterNotAvail  jetstream.ErrorCode = 10008
	jsErrClusterNotLeader jetstream.ErrorCode = 10009
)

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
		case tctx.Err() != nil:
			unanswered = true
			return pubErr
		case !isWrongLastSeq(pubErr):
			return pubErr
		case !unanswered:
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
			return errAgain // an earlier try of ours, or another write, not applied yet
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

func loseAnswer(tctx context.Context) error {
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
