package temporal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// Defaults.
const (
	// DefaultEngineName is the engine name in the refs an Engine issues.
	DefaultEngineName = "temporal"
	// DefaultTaskQueue is the Temporal task queue of the timeouts'
	// workflows and activities.
	DefaultTaskQueue = "jetsaga-timeouts"
	// DefaultCancelTimeout bounds how long Cancel waits for a worker to
	// answer its update, when its context has no earlier deadline.
	DefaultCancelTimeout = 30 * time.Second
	// DefaultDeliveryTimeout is the delivery activity's start-to-close
	// timeout: how long a worker that died during a delivery holds it up
	// before another attempt.
	DefaultDeliveryTimeout = 30 * time.Second
)

// Search attributes the engine sets and queries with
// WithSearchAttributes. All three are of type Keyword and must be
// registered in the namespace first (temporal operator search-attribute
// create, or the dev server's --search-attribute).
var (
	SearchAttributeQueue    = temporal.NewSearchAttributeKeyKeyword("JetsagaQueue")
	SearchAttributeSaga     = temporal.NewSearchAttributeKeyKeyword("JetsagaSaga")
	SearchAttributeInstance = temporal.NewSearchAttributeKeyKeyword("JetsagaInstance")
)

var (
	// ErrUndeliverable is matched (with timeout.ErrNotFound) by Cancel of
	// a timeout whose message the transport refused when it came due (an
	// invalid or oversized message, which Schedule checks with
	// WithBroker): it was never delivered and never will be.
	ErrUndeliverable = errors.New("temporal: the transport refused the timeout's message")
	// ErrInvalidOption is returned by New and NewWorker for an option
	// they refuse.
	ErrInvalidOption = errors.New("temporal: invalid option")
)

// config is what the options set; the Engine and the worker share it.
type config struct {
	name            string
	taskQueue       string
	logger          *slog.Logger
	searchAttrs     bool
	validator       *transport.Broker
	dataConverter   converter.DataConverter
	deliveryTimeout time.Duration
	cancelTimeout   time.Duration
	workerOptions   worker.Options
}

// Option configures an Engine, a Worker or Register. Options that do not
// concern one of them are ignored by it; the engine and its workers must
// agree on WithEngineName and WithTaskQueue.
type Option func(*config)

// WithEngineName names the engine: the prefix of its refs ("temporal:"),
// which a timeout.Router routes Cancel by, and part of its workflow IDs.
// 1-32 characters of [A-Za-z0-9_-]. Default: DefaultEngineName.
func WithEngineName(name string) Option { return func(c *config) { c.name = name } }

// WithTaskQueue sets the Temporal task queue of the timeouts' workflows
// and activities. Default: DefaultTaskQueue.
func WithTaskQueue(name string) Option { return func(c *config) { c.taskQueue = name } }

// WithLogger sets the logger of the engine and the delivery activity.
// Default: slog.Default(). (The Temporal SDK logs through the client's
// client.Options.Logger; log.NewStructuredLogger makes one of a
// *slog.Logger.)
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithSearchAttributes makes the engine set the Keyword search attributes
// SearchAttributeQueue, SearchAttributeSaga and SearchAttributeInstance on
// each timeout's workflow, and filter listings on them in the visibility
// store rather than in the client. They must be registered in the
// namespace (RegisterSearchAttributes does it on a self-hosted server);
// without them Schedule fails. Use it when a namespace holds many
// timeouts: without it, a listing by saga or instance reads every pending
// timeout of the queue (or of the engine) and filters in the client.
func WithSearchAttributes() Option { return func(c *config) { c.searchAttrs = true } }

// WithBroker makes Schedule check each timeout's message as the
// transport would when it is delivered (transport.Broker.Validate):
// an invalid or oversized message is refused at once with the
// transport's error (transport.ErrInvalidMessage,
// transport.ErrMessageTooLarge) rather than found undeliverable when
// it comes due. Engine only; the broker is not used otherwise.
func WithBroker(b *transport.Broker) Option { return func(c *config) { c.validator = b } }

// WithDataConverter tells the engine the client's data converter (if it
// set client.Options.DataConverter), which listings need to read the
// timeouts' memos. Default: converter.GetDefaultDataConverter().
func WithDataConverter(dc converter.DataConverter) Option {
	return func(c *config) { c.dataConverter = dc }
}

// WithDeliveryTimeout sets the delivery activity's start-to-close
// timeout: after a worker dies during a delivery, the next attempt starts
// this long after the last one did (plus the retry backoff). Worker only.
// Default: DefaultDeliveryTimeout.
func WithDeliveryTimeout(d time.Duration) Option { return func(c *config) { c.deliveryTimeout = d } }

// WithCancelTimeout bounds how long Cancel waits for a worker to answer
// its update (a context with an earlier deadline bounds it more). Past
// it, Cancel returns an error matching context.DeadlineExceeded: the
// outcome is unknown (the update may still be handled when a worker
// comes), and calling Cancel again is safe. A saga dispatcher then keeps
// the cancel among the step's pending effects and retries it. Engine
// only. Default: DefaultCancelTimeout.
func WithCancelTimeout(d time.Duration) Option { return func(c *config) { c.cancelTimeout = d } }

// WithWorkerOptions sets the options of the worker NewWorker creates
// (concurrency, rate limits, identity, pollers, ...). Pollers it leaves
// unset (neither the poller behavior nor the maximum of a kind) are the
// engine's: autoscaling, DefaultInitialPollers to start with, between
// DefaultMinPollers and DefaultMaxPollers. NewWorker only.
func WithWorkerOptions(o worker.Options) Option { return func(c *config) { c.workerOptions = o } }

func newConfig(opts []Option) (config, error) {
	c := config{name: DefaultEngineName, taskQueue: DefaultTaskQueue, deliveryTimeout: DefaultDeliveryTimeout, cancelTimeout: DefaultCancelTimeout}
	for _, o := range opts {
		o(&c)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.dataConverter == nil {
		c.dataConverter = converter.GetDefaultDataConverter()
	}
	switch {
	case len(c.name) == 0 || len(c.name) > 32 || transport.ValidateQueueName(c.name) != nil:
		return c, fmt.Errorf("%w: engine name %q: want 1-32 characters of [A-Za-z0-9_-]", ErrInvalidOption, c.name)
	case c.taskQueue == "":
		return c, fmt.Errorf("%w: empty task queue", ErrInvalidOption)
	case c.deliveryTimeout < time.Second:
		return c, fmt.Errorf("%w: delivery timeout %v: want at least 1s", ErrInvalidOption, c.deliveryTimeout)
	case c.cancelTimeout <= 0:
		return c, fmt.Errorf("%w: cancel timeout %v: want more than 0", ErrInvalidOption, c.cancelTimeout)
	}
	return c, nil
}

// Engine schedules timeouts as Temporal workflows, one per timeout: a
// timeout.Scheduler and timeout.Lister. Workers (NewWorker or Register)
// on the same task queue run the workflows and deliver the messages. An
// Engine is safe for concurrent use.
type Engine struct {
	c   client.Client
	cfg config
}

var (
	_ timeout.Scheduler = (*Engine)(nil)
	_ timeout.Lister    = (*Engine)(nil)
)

// New returns an engine that schedules timeouts through c, in c's
// namespace (client.Options.Namespace).
func New(c client.Client, opts ...Option) (*Engine, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Engine{c: c, cfg: cfg}, nil
}

// Name returns the engine's name, the prefix of its refs.
func (e *Engine) Name() string { return e.cfg.name }

// Route returns a timeout.Route to this engine for the timeouts due at
// least beyond from now, of the sagas named (all if none).
func (e *Engine) Route(beyond time.Duration, sagas ...string) timeout.Route {
	return timeout.Route{Beyond: beyond, Sagas: sagas, Engine: e.cfg.name, Scheduler: e}
}

// Schedule starts the timeout's workflow, whose ID is derived from the
// timeout's queue and ID. It is idempotent: scheduling the same timeout
// again returns the same ref and starts nothing, whether the first is
// pending, fired or cancelled (for as long as the namespace retains the
// closed workflow); Cancel of the ref then reports what became of it.
// Scheduling the same ID again with another due time or message changes
// nothing either: cancel it and schedule a new ID to reschedule.
func (e *Engine) Schedule(ctx context.Context, t timeout.Timeout) (timeout.Ref, error) {
	if err := t.Validate(); err != nil {
		return "", err
	}
	if err := transport.ValidateQueueName(t.Queue); err != nil {
		return "", fmt.Errorf("%w: %w", timeout.ErrInvalidTimeout, err)
	}
	m := t.DeliveryMessage()
	if e.cfg.validator != nil {
		if err := e.cfg.validator.Validate(m); err != nil {
			return "", err
		}
	}
	wid := workflowID(e.cfg.name, t.Queue, t.ID)
	opts := client.StartWorkflowOptions{
		ID:                       wid,
		TaskQueue:                e.cfg.taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		Memo: map[string]any{MemoKey: memo{
			ID: t.ID, Queue: t.Queue, Saga: t.Saga, Instance: t.Instance, At: t.At.UTC(), Properties: m.Properties,
		}},
		StaticSummary: fmt.Sprintf("jetsaga timeout %.64q to %s due %s", t.ID, t.Queue, t.At.UTC().Format(time.RFC3339Nano)),
	}
	if e.cfg.searchAttrs {
		upd := []temporal.SearchAttributeUpdate{SearchAttributeQueue.ValueSet(t.Queue)}
		if t.Saga != "" {
			upd = append(upd, SearchAttributeSaga.ValueSet(t.Saga))
		}
		if t.Instance != "" {
			upd = append(upd, SearchAttributeInstance.ValueSet(t.Instance))
		}
		opts.TypedSearchAttributes = temporal.NewSearchAttributes(upd...)
	}
	in := input{ID: t.ID, Queue: t.Queue, At: t.At.UTC(), Saga: t.Saga, Instance: t.Instance, Message: toMessage(m)}
	if _, err := e.c.ExecuteWorkflow(ctx, opts, WorkflowType, in); err != nil {
		return "", engineErr(fmt.Sprintf("scheduling timeout %.64q", t.ID), err)
	}
	return e.ref(wid), nil
}

// Cancel cancels the timeout ref names, with a definite outcome: nil if
// it will never be delivered, an error matching timeout.ErrAlreadyFired
// if it has been or will be, timeout.ErrNotFound if it was cancelled
// before (or never scheduled, or its workflow is older than the
// namespace's retention). It sends the workflow the cancel update, which
// the workflow orders with its timer, so it never races the delivery.
//
// Cancel of a pending timeout needs a worker: it waits for one to handle
// the update, up to WithCancelTimeout (or ctx's deadline). A closed
// workflow answers from its result, which Temporal keeps for the
// namespace's retention period. Any other error leaves the outcome
// unknown; calling Cancel again is safe.
func (e *Engine) Cancel(ctx context.Context, ref timeout.Ref) error {
	wid, err := e.parseRef(ref)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.cancelTimeout)
	defer cancel()
	// One update ID for every attempt of this call: Temporal deduplicates
	// updates by ID, so an attempt sent again after an error joins the
	// update already admitted instead of queueing a second one, and once
	// the workflow has closed it answers with that update's outcome (this
	// call cancelled it) rather than "workflow completed".
	updateID := newUpdateID()
	for attempt := 0; ; attempt++ {
		outcome, err := e.sendCancel(ctx, wid, updateID)
		switch {
		case err == nil && outcome == outcomeCancelled:
			return nil
		case err == nil && outcome == outcomeFired:
			return fmt.Errorf("%w: %s", timeout.ErrAlreadyFired, ref)
		case err == nil:
			return fmt.Errorf("temporal: cancelling %s: unknown outcome %q", ref, outcome)
		case expired(ctx):
			return e.noAnswer(ctx, ref, err)
		}
		// The update failed: the workflow does not exist, or it closed
		// (before the update, or with the update pending), or the update
		// was aborted before the workflow saw it (its workflow task failed,
		// or the server dropped the workflow from its cache). Which one the
		// workflow tells.
		running, oerr := e.closedOutcome(ctx, ref, wid, err)
		definite := oerr == nil || errors.Is(oerr, timeout.ErrNotFound) || errors.Is(oerr, timeout.ErrAlreadyFired)
		if !definite && expired(ctx) {
			return e.noAnswer(ctx, ref, err)
		}
		if !running || attempt == cancelAttempts-1 {
			return oerr
		}
		select {
		case <-ctx.Done():
			return e.noAnswer(ctx, ref, oerr)
		case <-time.After(min(20*time.Millisecond<<attempt, time.Second)):
		}
	}
}

// noAnswer is Cancel's error when ctx ended before an outcome.
func (e *Engine) noAnswer(ctx context.Context, ref timeout.Ref, err error) error {
	cause := ctx.Err()
	if cause == nil {
		cause = context.DeadlineExceeded // past the deadline, ctx's timer not yet run
	}
	return fmt.Errorf("%w: temporal: cancelling %s: no answer (is a worker running on task queue %s?): %w (%w)", timeout.ErrUnavailable, ref, e.cfg.taskQueue, cause, err)
}

// engineErr describes a failed call (what); a failure to reach Temporal
// or to get its answer in time (serviceerror.Unavailable,
// DeadlineExceeded, ResourceExhausted, or the context's deadline) matches
// timeout.ErrUnavailable as well.
func engineErr(what string, err error) error {
	var unavailable *serviceerror.Unavailable
	var deadline *serviceerror.DeadlineExceeded
	var exhausted *serviceerror.ResourceExhausted
	if errors.As(err, &unavailable) || errors.As(err, &deadline) || errors.As(err, &exhausted) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: temporal: %s: %w", timeout.ErrUnavailable, what, err)
	}
	return fmt.Errorf("temporal: %s: %w", what, err)
}

// expired reports whether ctx is done or past its deadline. An RPC can
// fail on the deadline before ctx's own timer marks ctx done: measured, an
// update failed with "stream terminated by RST_STREAM" and the describe
// after it with DeadlineExceeded while ctx.Err() was still nil.
func expired(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// cancelAttempts bounds how many times Cancel sends its update to a
// running workflow that failed it without answering.
const cancelAttempts = 10

// newUpdateID returns a random update ID, one per Cancel call: a second
// call must not join the first one's update, whose answer (cancelled) is
// not the second call's (ErrNotFound).
func newUpdateID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return "jetsaga-cancel-" + hex.EncodeToString(b[:])
}

// sendCancel sends the cancel update with ID updateID and returns its
// outcome.
func (e *Engine) sendCancel(ctx context.Context, wid, updateID string) (string, error) {
	h, err := e.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		UpdateID: updateID, WorkflowID: wid, UpdateName: UpdateCancel, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return "", err
	}
	var outcome string
	err = h.Get(ctx, &outcome)
	return outcome, err
}

// closedOutcome reports what became of the timeout whose workflow is wid,
// after a cancel update failed with updateErr: running, with updateErr,
// if the workflow still runs; else the outcome of Cancel.
func (e *Engine) closedOutcome(ctx context.Context, ref timeout.Ref, wid string, updateErr error) (running bool, err error) {
	desc, err := e.c.DescribeWorkflowExecution(ctx, wid, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return false, fmt.Errorf("%w: %s", timeout.ErrNotFound, ref)
	}
	if err != nil {
		return false, engineErr(fmt.Sprintf("cancelling %s", ref), fmt.Errorf("%w (then describing it: %w)", updateErr, err))
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return true, engineErr(fmt.Sprintf("cancelling %s", ref), updateErr)
	}
	var r result
	if err := e.c.GetWorkflow(ctx, wid, "").Get(ctx, &r); err != nil {
		return false, fmt.Errorf("temporal: cancelling %s: its workflow closed without a result, outcome unknown: %w", ref, err)
	}
	return false, r.err(ref)
}

// Pending lists the engine's pending timeouts that f selects, from
// Temporal's visibility store: the running workflows of WorkflowType on
// the engine's task queue, with the engine's workflow ID prefix (and
// f.Queue's), read from their memos. With WithSearchAttributes the store
// filters by saga and instance too; without, the engine does.
//
// The visibility store lags: a timeout appears, and disappears once
// fired or cancelled, typically within a second (SQL visibility) or a
// few (Elasticsearch). A timeout being delivered is listed until its
// delivery completes. Listings are unordered.
func (e *Engine) Pending(ctx context.Context, f timeout.Filter) iter.Seq2[timeout.Pending, error] {
	return func(yield func(timeout.Pending, error) bool) {
		q := e.query(f)
		var token []byte
		for {
			resp, err := e.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
				PageSize: 1000, NextPageToken: token, Query: q,
			})
			if err != nil {
				yield(timeout.Pending{}, fmt.Errorf("temporal: listing timeouts (%s): %w", q, err))
				return
			}
			for _, ex := range resp.GetExecutions() {
				var m memo
				if err := e.cfg.dataConverter.FromPayload(ex.GetMemo().GetFields()[MemoKey], &m); err != nil {
					if !yield(timeout.Pending{}, fmt.Errorf("temporal: reading the memo of %s: %w", ex.GetExecution().GetWorkflowId(), err)) {
						return
					}
					continue
				}
				p := timeout.Pending{
					Ref: e.ref(ex.GetExecution().GetWorkflowId()),
					ID:  m.ID, Queue: m.Queue, Saga: m.Saga, Instance: m.Instance, At: m.At, Properties: m.Properties,
				}
				if matches(f, p) && !yield(p, nil) {
					return
				}
			}
			if token = resp.GetNextPageToken(); len(token) == 0 {
				return
			}
		}
	}
}

func matches(f timeout.Filter, p timeout.Pending) bool {
	return (f.Queue == "" || f.Queue == p.Queue) && (f.Saga == "" || f.Saga == p.Saga) && (f.Instance == "" || f.Instance == p.Instance)
}

// query is the visibility query of a listing.
func (e *Engine) query(f timeout.Filter) string {
	var b strings.Builder
	fmt.Fprintf(&b, "WorkflowType = '%s' AND ExecutionStatus = 'Running'", WorkflowType)
	if quotable(e.cfg.taskQueue) {
		fmt.Fprintf(&b, " AND TaskQueue = '%s'", e.cfg.taskQueue)
	}
	prefix := "jetsaga/" + e.cfg.name + "/"
	if f.Queue != "" && transport.ValidateQueueName(f.Queue) == nil {
		prefix = workflowIDPrefix(e.cfg.name, f.Queue)
	}
	fmt.Fprintf(&b, " AND WorkflowId STARTS_WITH '%s'", prefix)
	if e.cfg.searchAttrs {
		for _, c := range []struct{ key, v string }{{SearchAttributeSaga.GetName(), f.Saga}, {SearchAttributeInstance.GetName(), f.Instance}} {
			// Values the query language could misread are filtered in
			// the client only.
			if c.v != "" && quotable(c.v) {
				fmt.Fprintf(&b, " AND %s = '%s'", c.key, c.v)
			}
		}
	}
	return b.String()
}

// quotable reports whether s can go between single quotes in a
// visibility query as it is.
func quotable(s string) bool {
	return !strings.ContainsAny(s, `'"\`) && !strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f })
}
