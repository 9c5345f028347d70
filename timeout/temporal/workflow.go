package temporal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// Names under which the worker registers the timeout's workflow, its
// update and its activity. They are part of the engine's contract with
// the timeouts already scheduled: a worker must register them under
// these names for as long as such timeouts are pending.
const (
	// WorkflowType is the workflow type of every timeout: one workflow
	// execution per timeout.
	WorkflowType = "jetsaga.Timeout"
	// UpdateCancel is the workflow update Cancel sends.
	UpdateCancel = "cancel"
	// UpdateDeliver is the workflow update the delivery activity sends
	// its workflow when the activity waited for the due time itself (a
	// wait under a second): the workflow answers whether to send, and
	// orders that answer with the cancel update.
	UpdateDeliver = "deliver"
	// ActivityDeliver is the activity that delivers a timeout's message.
	ActivityDeliver = "jetsaga.DeliverTimeout"
	// MemoKey is the memo field holding a timeout's description (queue,
	// ID, saga, instance, due time, properties), which listings read.
	MemoKey = "jetsaga"
)

// Outcomes of a timeout's workflow, which its result and the cancel
// update report.
const (
	outcomeFired         = "fired"
	outcomeCancelled     = "cancelled"
	outcomeUndeliverable = "undeliverable"
)

// input is a timeout's workflow input: everything the delivery needs.
type input struct {
	ID, Queue      string
	At             time.Time
	Saga, Instance string
	// Message is the message to deliver (Timeout.DeliveryMessage).
	Message message
	// Confirm, set on the delivery activity's input only, makes the
	// activity wait for the due time (by its worker's clock) and then
	// ask the workflow with UpdateDeliver whether to send: the workflow
	// left the wait to the activity because it was under a second.
	Confirm bool `json:",omitempty"`
}

// message is the part of a transport.Message a timeout delivers.
type message struct {
	Body                                                    []byte            `json:",omitempty"`
	ContentType, CorrelationID, SessionID, ReplyTo, Subject string            `json:",omitempty"`
	MessageID                                               string            `json:",omitempty"`
	Properties                                              map[string]string `json:",omitempty"`
}

func toMessage(m *transport.Message) message {
	return message{
		Body: m.Body, ContentType: m.ContentType, CorrelationID: m.CorrelationID, SessionID: m.SessionID,
		ReplyTo: m.ReplyTo, Subject: m.Subject, MessageID: m.MessageID, Properties: m.Properties,
	}
}

func (m message) transport() *transport.Message {
	return &transport.Message{
		Body: m.Body, ContentType: m.ContentType, CorrelationID: m.CorrelationID, SessionID: m.SessionID,
		ReplyTo: m.ReplyTo, Subject: m.Subject, MessageID: m.MessageID, Properties: m.Properties,
	}
}

// memo is what listings read of a pending timeout.
type memo struct {
	ID, Queue      string
	Saga, Instance string `json:",omitempty"`
	At             time.Time
	Properties     map[string]string `json:",omitempty"`
}

// result is what a timeout's workflow returns.
type result struct {
	// Outcome is outcomeFired, outcomeCancelled or outcomeUndeliverable.
	Outcome string
	// Delivered is when the message was sent (worker clock), for a fired
	// timeout; Duplicate says the queue already had it (an activity retried
	// after its send).
	Delivered time.Time `json:",omitzero"`
	Duplicate bool      `json:",omitempty"`
	// Error is why the transport refused the message (undeliverable).
	Error string `json:",omitempty"`
}

// delivery is what the delivery activity returns.
type delivery struct {
	At        time.Time
	Duplicate bool
	Attempt   int32
	// Cancelled says the workflow answered the activity's UpdateDeliver
	// with "cancelled": nothing was sent.
	Cancelled bool `json:",omitempty"`
}

// errUndeliverableType is the application error type of a message the
// transport refuses; such an activity is not retried.
const errUndeliverableType = "jetsaga.Undeliverable"

// Sub-second waits. A Temporal timer shorter than a second fires about a
// second after it started (measured on the dev server: a timer of 300 ms
// fired 0.7-0.9 s late, one of 700 ms 0.3-0.45 s late, at the workflow's
// start or after an earlier timer or activity, while timers of a second
// or more fired within 0.2 s; one exception seen: a 530 ms timer started
// by a first workflow task that waited a second for a worker fired on
// time). So when the wait left is under a second, the
// workflow does not start a timer: it runs the delivery activity at
// once, with input.Confirm, and the activity waits for the due time, then
// asks the workflow (UpdateDeliver) whether to send. The cancel update
// and the activity's question are both workflow updates, ordered in the
// workflow's history: whichever comes first decides, as the timer and
// the cancel do on the timer path.
//
// changeSubSecond is the workflow.GetVersion change of that path;
// histories recorded before it (DefaultVersion) replay on the timer path.
const (
	changeSubSecond  = "jetsaga-subsecond-wait"
	versionSubSecond = 1
	// minTimer is the shortest wait the workflow leaves to a timer.
	minTimer = time.Second
)

// errNotConfirming rejects an UpdateDeliver the workflow did not ask for.
var errNotConfirming = errors.New("temporal: the timeout's workflow is not waiting for its delivery's confirmation")

// timeoutWorkflow waits until the timeout's due time on a durable timer,
// unless the cancel update comes first, then delivers the message with
// the delivery activity. The update and the timer are ordered in the
// workflow's history, and the workflow code decides between them: once
// the delivery starts, the update answers "fired"; before, it cancels.
// A wait under a second is the delivery activity's, which then asks the
// workflow with UpdateDeliver before it sends (see minTimer).
func (w *workerConfig) timeoutWorkflow(ctx workflow.Context, in input) (result, error) {
	var cancelled, firing, confirming bool
	err := workflow.SetUpdateHandler(ctx, UpdateCancel, func(ctx workflow.Context) (string, error) {
		if firing {
			return outcomeFired, nil
		}
		cancelled = true
		return outcomeCancelled, nil
	})
	if err != nil {
		return result{}, err
	}
	err = workflow.SetUpdateHandlerWithOptions(ctx, UpdateDeliver, func(ctx workflow.Context) (string, error) {
		if cancelled {
			return outcomeCancelled, nil
		}
		firing = true
		return outcomeFired, nil
	}, workflow.UpdateHandlerOptions{Validator: func() error {
		if !confirming {
			return errNotConfirming
		}
		return nil
	}})
	if err != nil {
		return result{}, err
	}
	wait := in.At.Sub(workflow.Now(ctx))
	confirm := wait > 0 && wait < minTimer && !cancelled &&
		workflow.GetVersion(ctx, changeSubSecond, workflow.DefaultVersion, versionSubSecond) == versionSubSecond
	if wait > 0 && !confirm {
		if _, err := workflow.AwaitWithTimeout(ctx, wait, func() bool { return cancelled }); err != nil {
			return result{}, err
		}
	}
	if cancelled {
		return result{Outcome: outcomeCancelled}, nil
	}
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: w.deliveryTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        time.Minute,
			MaximumAttempts:        0, // until delivered
			NonRetryableErrorTypes: []string{errUndeliverableType},
		},
	}
	if confirm {
		confirming, in.Confirm = true, true
		opts.StartToCloseTimeout += wait // the activity's
	} else {
		firing = true
	}
	actx := workflow.WithActivityOptions(ctx, opts)
	var d delivery
	if err := workflow.ExecuteActivity(actx, ActivityDeliver, in).Get(ctx, &d); err != nil {
		var app *temporal.ApplicationError
		if errors.As(err, &app) && app.Type() == errUndeliverableType {
			workflow.GetLogger(ctx).Error("jetsaga: timeout undeliverable", "ID", in.ID, "Queue", in.Queue, "Error", app.Message())
			return result{Outcome: outcomeUndeliverable, Error: app.Message()}, nil
		}
		return result{}, err
	}
	if d.Cancelled {
		return result{Outcome: outcomeCancelled}, nil
	}
	return result{Outcome: outcomeFired, Delivered: d.At, Duplicate: d.Duplicate}, nil
}

// afterSend, if set (by tests), runs in the delivery activity right after
// the message was sent, before the activity completes.
var afterSend atomic.Pointer[func(in input)]

// deliver is the delivery activity: it sends the message to its queue,
// never before its due time by the worker's clock, and the queue's
// duplicate detection makes a retried delivery (the worker died after the
// send) a no-op. With in.Confirm it first asks its workflow, at the due
// time, whether to send (UpdateDeliver).
func (w *workerConfig) deliver(ctx context.Context, in input) (delivery, error) {
	info := activity.GetInfo(ctx)
	if wait := time.Until(in.At); wait > 0 {
		// The timer fired by the server's clock and this worker's is
		// behind, or the workflow left a sub-second wait to the activity.
		bound := w.deliveryTimeout / 2
		if in.Confirm {
			bound += minTimer
		}
		if wait > bound {
			return delivery{}, fmt.Errorf("jetsaga: timeout %s is due in %v by this worker's clock: clocks skewed", in.ID, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return delivery{}, ctx.Err()
		}
	}
	if in.Confirm {
		send, err := confirmDelivery(ctx, info)
		if err != nil {
			return delivery{}, fmt.Errorf("jetsaga: timeout %s: asking its workflow to deliver: %w", in.ID, err)
		}
		if !send {
			w.logger.LogAttrs(ctx, slog.LevelDebug, "jetsaga: timeout cancelled during its sub-second wait", slog.String("id", in.ID), slog.String("queue", in.Queue))
			return delivery{Cancelled: true, Attempt: info.Attempt}, nil
		}
	}
	q, err := w.broker.Queue(ctx, in.Queue)
	if err != nil {
		return delivery{}, w.sendError(in, err)
	}
	r, err := q.Send(ctx, in.Message.transport())
	if err != nil {
		return delivery{}, w.sendError(in, err)
	}
	if f := afterSend.Load(); f != nil {
		(*f)(in)
	}
	now := time.Now()
	w.logger.LogAttrs(ctx, slog.LevelDebug, "jetsaga: timeout delivered", slog.String("id", in.ID), slog.String("queue", in.Queue),
		slog.Duration("late", now.Sub(in.At)), slog.Bool("duplicate", r.Duplicate), slog.Int("attempt", int(info.Attempt)))
	return delivery{At: now, Duplicate: r.Duplicate, Attempt: info.Attempt}, nil
}

// deliverUpdateID is the ID of every UpdateDeliver a timeout's activity
// sends: Temporal deduplicates updates by ID, so a retried attempt gets
// the answer the first one got, and the answer never changes.
const deliverUpdateID = "jetsaga-deliver"

// confirmDelivery sends the activity's workflow UpdateDeliver and reports
// whether the workflow said to send (false: the timeout was cancelled).
func confirmDelivery(ctx context.Context, info activity.Info) (bool, error) {
	h, err := activity.GetClient(ctx).UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		UpdateID: deliverUpdateID, WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
		UpdateName: UpdateDeliver, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return false, err
	}
	var outcome string
	if err := h.Get(ctx, &outcome); err != nil {
		return false, err
	}
	switch outcome {
	case outcomeFired:
		return true, nil
	case outcomeCancelled:
		return false, nil
	}
	return false, fmt.Errorf("unknown answer %q", outcome)
}

// sendError makes a transport error an activity error: not retried for a
// message or queue the transport refuses, retried otherwise.
func (w *workerConfig) sendError(in input, err error) error {
	if errors.Is(err, transport.ErrInvalidMessage) || errors.Is(err, transport.ErrMessageTooLarge) ||
		errors.Is(err, transport.ErrInvalidQueueName) || errors.Is(err, transport.ErrSessionRequired) {
		return temporal.NewNonRetryableApplicationError(err.Error(), errUndeliverableType, err)
	}
	w.logger.Warn("jetsaga: delivering a timeout failed; retrying", "id", in.ID, "queue", in.Queue, "error", err)
	return err
}

// err returns what Cancel reports for the timeout ref whose workflow
// closed with r.
func (r result) err(ref timeout.Ref) error {
	switch r.Outcome {
	case outcomeFired:
		return fmt.Errorf("%w: %s", timeout.ErrAlreadyFired, ref)
	case outcomeCancelled:
		return fmt.Errorf("%w: %s was cancelled", timeout.ErrNotFound, ref)
	case outcomeUndeliverable:
		return fmt.Errorf("%w: %s: %w: %s", timeout.ErrNotFound, ref, ErrUndeliverable, r.Error)
	}
	return fmt.Errorf("temporal: %s: unknown outcome %q", ref, r.Outcome)
}
