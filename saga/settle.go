package saga

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jetsaga/jetsaga/transport"
)

// The settle stage: every delivery Handle runs ends here, completed,
// abandoned for redelivery, retried later or dead-lettered. A step that
// committed completes its message (without waiting for the broker when
// the message is in every instance's inbox) after scheduling the retry of
// effects that must wait; a step that failed is retried later while the
// retry policy allows, else dead-lettered with the reason and the retry
// history; a message for a newer worker waits for one (version wait).

// Dead-letter reasons the dispatcher gives.
const (
	// ReasonUnknownType: no saga of the dispatcher handles the message's
	// type, or a timeout names a saga or type it does not run.
	ReasonUnknownType = "UnknownMessageType"
	// ReasonMalformed: the body cannot be decoded.
	ReasonMalformed = "MalformedMessage"
	// ReasonSagaNotFound: no instance, under NotFoundPolicy.DeadLetter.
	ReasonSagaNotFound = "SagaNotFound"
	// ReasonPermanent: the step failed with a Permanent error, or asked
	// for something invalid. Nothing of it was committed.
	ReasonPermanent = "PermanentError"
	// ReasonRetriesExhausted: the step failed on every immediate and
	// delayed retry. Nothing of it was committed.
	ReasonRetriesExhausted = "RetriesExhausted"
	// ReasonTimeoutNotDue: a timeout activated early arrived further
	// ahead of its due time, by the dispatcher's clock, than its engine's
	// lead plus a second (ErrTimeoutNotDue). Nothing ran.
	ReasonTimeoutNotDue = "TimeoutNotDue"
)

// Properties of a dead letter the dispatcher moved there after its step
// failed (reasons ReasonPermanent, ReasonRetriesExhausted,
// ReasonMalformed, ReasonSagaNotFound). The dead letter is otherwise the
// message as it was first sent — MessageID, body, CorrelationID, ReplyTo
// and properties — without the dispatcher's bookkeeping of delayed
// retries, so that an operator can send it again as it is. The dispatcher
// never reads these properties: a message sent again starts with a fresh
// history. Mind the queue's DuplicateWindow: within it of the first send,
// a message sent again with the same MessageID is dropped as a duplicate.
const (
	// PropertyAttempts is how many times the step ran, over every
	// immediate and delayed retry (decimal).
	PropertyAttempts = "jetsaga-attempts"
	// PropertyDelayedRetries is how many delayed retries the message had
	// before it was dead-lettered (decimal; at most RetryPolicy.Delayed).
	PropertyDelayedRetries = "jetsaga-delayed-retries"
	// PropertyFirstFailure is when the step first failed (RFC 3339, UTC,
	// by the dispatcher's clock). The dead letter's EnqueuedAt is when it
	// was dead-lettered.
	PropertyFirstFailure = "jetsaga-first-failure"
	// PropertyLastError is the last error, up to 1024 bytes, control
	// characters replaced by spaces. The dead letter's description has
	// it at greater length.
	PropertyLastError = "jetsaga-last-error"
)

// settle settles del as the step stage left it (see stepped).
func (d *Dispatcher) settle(ctx context.Context, del *transport.Delivery, st stepped, info *StepInfo) StepResult {
	var res StepResult
	switch {
	case st.deadLetter != "":
		res = d.deadLetter(ctx, del, st.deadLetter, st.err, nil)
	case st.outcome != EffectsPending && len(st.pending) == 0 && unavailable(st.err):
		// An outage: the message stays with the runner, which runs the
		// step again when the dependency is back (circuit.go). That the
		// step's own time ran out (its calls waited for a server that
		// does not answer) does not make it the message's failure.
		res = StepResult{Outcome: Waiting, Err: st.err}
	case st.err != nil && st.outcome != EffectsPending && d.killSwitched(ctx, st):
		res = StepResult{Outcome: Waiting, Err: fmt.Errorf("%w: kill switch tripped: %w", ErrUnavailable, st.err)}
	case st.err != nil && st.outcome != EffectsPending:
		res = d.settleFailed(ctx, del, st, info)
	default:
		d.kill.settled()
		res = d.settleCommitted(ctx, del, st, info)
	}
	res.Conflicts = st.conflicts
	return res
}

// killSwitched counts a failed step with the kill switch (WithKillSwitch)
// and reports whether it is tripped, making the step wait as in an
// outage. Failures that are the message's own for certain (permanent,
// malformed, no instance, a newer record) and steps that ran out of their
// own time go by the policy.
func (d *Dispatcher) killSwitched(ctx context.Context, st stepped) bool {
	if d.kill == nil || len(st.pending) > 0 || ctx.Err() != nil || errors.Is(st.err, ErrPermanent) ||
		errors.Is(st.err, ErrMalformed) || errors.Is(st.err, ErrSagaNotFound) || errors.Is(st.err, ErrDataVersionAhead) {
		return false
	}
	return d.kill.failed()
}

// settleFailed settles a message whose step failed on an instance, after
// scheduling the retry of what the others committed and could not carry
// out (or abandons it if that fails): a version wait if the instance's
// record is newer than this worker's saga, else a delayed retry or the
// dead-letter queue (fail).
func (d *Dispatcher) settleFailed(ctx context.Context, del *transport.Delivery, st stepped, info *StepInfo) StepResult {
	if serr := d.flushLater(ctx, st.pending, st.identity); serr != nil {
		_ = del.Abandon(ctx)
		return StepResult{Outcome: Abandoned, Err: errors.Join(st.err, serr)}
	}
	if errors.Is(st.err, ErrDataVersionAhead) {
		return d.versionWait(ctx, del, st.identity, st.done, st.err, info)
	}
	return d.fail(ctx, del, st.identity, st.done, st.err, st.tries)
}

// settleCommitted completes a message every step committed, found a
// duplicate or had no use for, after scheduling the retry of committed
// effects that must wait (st.err then matches ErrEffectsPending); it
// abandons the message if that retry cannot be scheduled, so that its
// redelivery retries them.
func (d *Dispatcher) settleCommitted(ctx context.Context, del *transport.Delivery, st stepped, info *StepInfo) StepResult {
	if len(st.pending) > 0 {
		if serr := d.flushLater(ctx, st.pending, st.identity); serr != nil {
			d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: scheduling the retry of pending effects failed; abandoning the message, whose redelivery retries them",
				slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq), slog.Any("error", serr), slog.Any("cause", st.pendingErr))
			_ = del.Abandon(ctx)
			return StepResult{Outcome: Abandoned, Err: errors.Join(st.err, serr)}
		}
		d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: step committed; its effects could not all be carried out and will be retried",
			slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq), slog.String("saga.type", info.Saga),
			slog.String("saga.id", info.ID), slog.Any("error", st.pendingErr))
	}
	if d.cfg.loseCompletion != nil && d.cfg.loseCompletion(del) {
		return StepResult{Outcome: st.outcome, Err: errors.Join(st.err, errCompletionLost)}
	}
	complete := del.Complete
	if st.inInbox && len(st.pending) == 0 {
		// Every instance the message went to has its identity in its
		// inbox: a redelivery, should the completion be lost, is a
		// duplicate and has no effect. No need to wait for the broker.
		complete = del.CompleteNoWait
	}
	if cerr := complete(ctx); cerr != nil {
		d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: completing message failed; it will be redelivered and deduplicated",
			slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq), slog.Any("error", cerr))
		return StepResult{Outcome: Abandoned, Err: errors.Join(st.err, cerr)}
	}
	return StepResult{Outcome: st.outcome, Err: st.err}
}

// settleFlush completes a message of flushType, after scheduling it
// again (the next attempt) if the effects it carries out still cannot be.
func (d *Dispatcher) settleFlush(ctx context.Context, del *transport.Delivery, f flushed) StepResult {
	outcome, err := f.outcome, f.err
	if unavailable(err) {
		// What the effects need is down (a timeout engine, the server):
		// the runner keeps the message and tries again as it does a step
		// that waits (circuit.go), every few seconds at most, rather than
		// by the retry policy's backoff, which can grow to minutes.
		return StepResult{Outcome: Waiting, Err: fmt.Errorf("%w: saga %s/%s: %w", ErrEffectsPending, f.saga, f.id, err)}
	}
	if err != nil && !errors.Is(err, ErrPermanent) {
		err = fmt.Errorf("%w: saga %s/%s: %w", ErrEffectsPending, f.saga, f.id, err)
		if serr := d.scheduleFlush(ctx, f.saga, f.id, f.origin, f.attempt+1); serr != nil {
			_ = del.Abandon(ctx)
			return StepResult{Outcome: Abandoned, Err: errors.Join(err, serr)}
		}
		outcome = EffectsPending
		d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: pending effects still cannot be carried out; retrying later",
			slog.String("saga.type", f.saga), slog.String("saga.id", f.id), slog.Int("attempt", f.attempt), slog.Any("error", err))
	} else if err != nil {
		d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: pending effects cannot be carried out; giving up",
			slog.String("saga.type", f.saga), slog.String("saga.id", f.id), slog.Any("error", err))
	}
	if cerr := del.Complete(ctx); cerr != nil {
		return StepResult{Outcome: Abandoned, Err: errors.Join(err, cerr)}
	}
	return StepResult{Outcome: outcome, Err: err}
}

// abandonHeld hands back for redelivery a timeout whose hold ended before
// its due time (err says why).
func (d *Dispatcher) abandonHeld(ctx context.Context, del *transport.Delivery, due time.Time, err error) {
	d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: stopped holding a timeout activated early; it will be redelivered",
		slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq), slog.Time("due", due), slog.Any("error", err))
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = del.Abandon(actx)
}

// abandonUnopened hands back for redelivery a message that cannot be
// handled because the dispatcher's queue cannot be opened (err).
func (d *Dispatcher) abandonUnopened(ctx context.Context, del *transport.Delivery, err error) {
	d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: cannot open queue; abandoning message", slog.String("queue", d.queueName), slog.Any("error", err))
	_ = del.Abandon(ctx)
}

// abandonUnstarted hands back a message of a batch that Run, stopping,
// did not start: it goes back to the queue at once rather than when its
// lock expires.
func (d *Dispatcher) abandonUnstarted(ctx context.Context, del *transport.Delivery) {
	_ = del.Abandon(ctx)
}

// errCompletionLost: a test made a step not complete its message.
var errCompletionLost = errors.New("saga: completion lost (test)")

// fail settles a message whose handling failed: a delayed retry while the
// policy allows, else the dead-letter queue with the error. tries is how
// many times the step ran on this delivery.
// done lists the instances the message is committed on (see propDone).
func (d *Dispatcher) fail(ctx context.Context, del *transport.Delivery, identity string, done []string, err error, tries int) StepResult {
	h := d.history(del, err, tries)
	switch {
	case errors.Is(err, ErrMalformed):
		return d.deadLetter(ctx, del, ReasonMalformed, err, h)
	case errors.Is(err, ErrSagaNotFound):
		return d.deadLetter(ctx, del, ReasonSagaNotFound, err, h)
	case errors.Is(err, ErrCallInDoubt):
		return d.deadLetter(ctx, del, ReasonCallInDoubt, err, h)
	case errors.Is(err, ErrPermanent):
		return d.deadLetter(ctx, del, ReasonPermanent, err, h)
	}
	if h.delayed >= d.cfg.retry.Delayed {
		return d.deadLetter(ctx, del, ReasonRetriesExhausted, err, h)
	}
	delay := d.cfg.retry.Backoff(h.delayed + 1)
	retry := del.Message.Clone()
	if _, isRetry := del.Properties[propOrigin]; !isRetry {
		delete(retry.Properties, propMessageID)
		if del.MessageID != "" {
			retry.Properties[propMessageID] = del.MessageID
		}
	}
	retry.MessageID = effectID(identity, "retry", h.delayed+1)
	retry.Properties[propOrigin] = identity
	retry.Properties[propAttempt] = strconv.Itoa(h.delayed + 1)
	retry.Properties[propTries] = strconv.Itoa(h.attempts)
	retry.Properties[propSince] = h.first.UTC().Format(time.RFC3339Nano)
	setDone(retry, done)
	retry.ScheduledAt = time.Time{}
	if _, serr := d.q.Schedule(ctx, retry, d.cfg.now().Add(delay)); serr != nil {
		d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: scheduling a delayed retry failed; abandoning",
			slog.Uint64("seq", del.Seq), slog.Any("error", serr), slog.Any("cause", err))
		_ = del.Abandon(ctx)
		return StepResult{Outcome: Abandoned, Err: err}
	}
	d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: handler failed; retrying later",
		slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq), slog.Int("attempt", h.delayed+1),
		slog.Duration("delay", delay), slog.Any("error", err))
	if cerr := del.Complete(ctx); cerr != nil {
		return StepResult{Outcome: Abandoned, Err: err}
	}
	return StepResult{Outcome: Retried, Err: err}
}

// versionWait leaves a message whose instance's record is newer than its
// saga's definition for a newer worker: a copy of it is scheduled on the
// queue after WithVersionWait, keeping its identity (as a delayed retry's
// copy does, without counting as one), and the message is completed.
func (d *Dispatcher) versionWait(ctx context.Context, del *transport.Delivery, identity string, done []string, err error, info *StepInfo) StepResult {
	n, _ := strconv.Atoi(del.Properties[propVersionWaits])
	n++
	again := del.Message.Clone()
	if _, isRetry := del.Properties[propOrigin]; !isRetry {
		delete(again.Properties, propMessageID)
		if del.MessageID != "" {
			again.Properties[propMessageID] = del.MessageID
		}
	}
	again.MessageID = effectID(identity, "version-wait", n)
	again.Properties[propOrigin] = identity
	again.Properties[propVersionWaits] = strconv.Itoa(n)
	setDone(again, done)
	again.ScheduledAt = time.Time{}
	if _, serr := d.q.Schedule(ctx, again, d.cfg.now().Add(d.cfg.versionWait)); serr != nil {
		d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: scheduling a version wait failed; abandoning",
			slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq), slog.Any("error", serr), slog.Any("cause", err))
		_ = del.Abandon(ctx)
		return StepResult{Outcome: Abandoned, Err: errors.Join(err, serr)}
	}
	d.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "saga: version wait: the instance's record is newer than this worker's saga; leaving the message for a newer worker",
		slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq), slog.String("saga.type", info.Saga),
		slog.String("saga.id", info.ID), slog.Int("waits", n), slog.Duration("delay", d.cfg.versionWait), slog.Any("error", err))
	if cerr := del.Complete(ctx); cerr != nil {
		return StepResult{Outcome: Abandoned, Err: errors.Join(err, cerr)}
	}
	return StepResult{Outcome: VersionWait, Err: err}
}

// history is a failing message's retry history, as its dead letter
// reports it.
type history struct {
	attempts int       // step runs over all deliveries
	delayed  int       // delayed retries so far
	first    time.Time // first failure
	last     string    // the last error
}

func (d *Dispatcher) history(del *transport.Delivery, err error, tries int) *history {
	h := &history{attempts: tries, first: d.cfg.now(), last: err.Error()}
	if _, isRetry := del.Properties[propOrigin]; isRetry {
		h.delayed, _ = strconv.Atoi(del.Properties[propAttempt])
		prev, _ := strconv.Atoi(del.Properties[propTries])
		h.attempts += prev
		if t, perr := time.Parse(time.RFC3339Nano, del.Properties[propSince]); perr == nil {
			h.first = t
		}
	}
	return h
}

// deadLetter moves the message to the dead-letter queue as it was first
// received: a delayed retry's copy gets the original's MessageID back and
// loses the dispatcher's bookkeeping properties. A failed step's dead
// letter (h != nil) carries its retry history (PropertyAttempts, ...).
func (d *Dispatcher) deadLetter(ctx context.Context, del *transport.Delivery, reason string, err error, h *history) StepResult {
	desc := sanitize(truncate(err.Error(), 4000))
	d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: message dead-lettered",
		slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq), slog.String("reason", reason), slog.Any("error", err))
	var restore []transport.DeadLetterOption
	props := make(map[string]string)
	if _, isRetry := del.Properties[propOrigin]; isRetry {
		restore = append(restore, transport.WithDeadLetterMessageID(del.Properties[propMessageID]))
		for _, k := range retryProps {
			props[k] = "" // removes it
		}
	}
	if len(props) > 0 {
		restore = append(restore, transport.WithDeadLetterProperties(props))
	}
	opts := restore
	if h != nil {
		opts = append(slices.Clip(restore), transport.WithDeadLetterProperties(map[string]string{
			PropertyAttempts:       strconv.Itoa(h.attempts),
			PropertyDelayedRetries: strconv.Itoa(h.delayed),
			PropertyFirstFailure:   h.first.UTC().Format(time.RFC3339Nano),
			PropertyLastError:      sanitize(truncate(h.last, maxLastError)),
		}))
	}
	derr := del.DeadLetter(ctx, reason, desc, opts...)
	if errors.Is(derr, transport.ErrInvalidMessage) || errors.Is(derr, transport.ErrMessageTooLarge) {
		// No room for the history (too many properties, or a message
		// close to the size limit): the message as it came is what counts.
		if derr = del.DeadLetter(ctx, reason, desc, restore...); errors.Is(derr, transport.ErrInvalidMessage) || errors.Is(derr, transport.ErrMessageTooLarge) {
			derr = del.DeadLetter(ctx, reason, desc)
		}
	}
	if derr != nil {
		_ = del.Abandon(ctx)
		return StepResult{Outcome: Abandoned, Err: errors.Join(err, derr)}
	}
	return StepResult{Outcome: DeadLettered, Err: err}
}

// maxLastError bounds PropertyLastError; the dead letter's description
// has the error at greater length.
const maxLastError = 1024

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// sanitize replaces control characters, which a dead-letter description
// may not carry, with spaces.
func sanitize(s string) string {
	b := []rune(s)
	for i, r := range b {
		if r < 0x20 || r >= 0x7f && r <= 0x9f {
			b[i] = ' '
		}
	}
	return string(b)
}
