package saga

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/jetsaga/jetsaga/transport"
)

// The settle stage for a step that failed: a delayed retry while the
// retry policy allows, else the dead-letter queue with the reason and the
// retry history. (A step that succeeded is completed in step.go.)

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
