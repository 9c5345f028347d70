package saga

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// Dead-letter reasons the dispatcher gives.
const (
	ReasonUnknownType      = "UnknownMessageType"
	ReasonMalformed        = "MalformedMessage"
	ReasonSagaNotFound     = "SagaNotFound"
	ReasonPermanent        = "PermanentError"
	ReasonRetriesExhausted = "RetriesExhausted"
)

// Dispatcher is an endpoint: it receives the messages of one transport
// queue, runs the sagas registered with it, and commits each step all or
// nothing (see the package documentation). Create it with NewDispatcher
// and run it with Run; it is safe for concurrent use.
type Dispatcher struct {
	cfg         config
	broker      *transport.Broker
	store       Store
	queueName   string
	subscribers map[string][]string
	byType      map[string][]sagaRuntime
	byName      map[string]sagaRuntime

	openOnce sync.Once
	q        *transport.Queue
	openErr  error
}

// NewDispatcher returns a dispatcher for queue on broker b, keeping saga
// state in store. It returns ErrInvalidDefinition for a saga definition
// that cannot work and ErrInvalidOption for a bad option.
func NewDispatcher(b *transport.Broker, store Store, queue string, opts ...Option) (*Dispatcher, error) {
	if b == nil || store == nil {
		return nil, fmt.Errorf("%w: nil broker or store", ErrInvalidOption)
	}
	if err := transport.ValidateQueueName(queue); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	c := config{
		codec:       JSON{},
		concurrency: 8,
		conflicts:   10,
		drain:       30 * time.Second,
		retry:       RetryPolicy{Immediate: 3, Delayed: 3, Backoff: defaultBackoff},
		subscribers: make(map[string][]string),
		now:         time.Now,
	}
	c.queue.Name = queue
	for _, o := range opts {
		if err := o.apply(&c); err != nil {
			return nil, err
		}
	}
	if c.queue.RequiresSession {
		return nil, fmt.Errorf("%w: a dispatcher's queue cannot require sessions: sagas order work per instance with optimistic concurrency", ErrInvalidOption)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.timeouts == nil {
		c.timeouts = timeout.NewTransport(b)
	}
	d := &Dispatcher{
		cfg: c, broker: b, store: store, queueName: queue, subscribers: c.subscribers,
		byType: make(map[string][]sagaRuntime), byName: make(map[string]sagaRuntime),
	}
	if len(c.sagas) == 0 {
		return nil, fmt.Errorf("%w: no sagas (use WithSagas)", ErrInvalidOption)
	}
	for _, s := range c.sagas {
		rt := s.runtime()
		if err := rt.validate(); err != nil {
			return nil, err
		}
		if _, dup := d.byName[rt.Name()]; dup {
			return nil, fmt.Errorf("%w: saga %s registered twice", ErrInvalidDefinition, rt.Name())
		}
		d.byName[rt.Name()] = rt
		for _, mt := range rt.messageTypes() {
			d.byType[mt] = append(d.byType[mt], rt)
		}
	}
	return d, nil
}

// Queue returns the name of the dispatcher's queue.
func (d *Dispatcher) Queue() string { return d.queueName }

// Open opens the dispatcher's queue, creating it or updating it to the
// config given with WithQueueConfig. Run, Send and Handle open it when
// they need it; call Open to know the queue exists before messages flow.
func (d *Dispatcher) Open(ctx context.Context) error {
	_, err := d.open(ctx)
	return err
}

func (d *Dispatcher) open(ctx context.Context) (*transport.Queue, error) {
	d.openOnce.Do(func() {
		d.q, d.openErr = d.broker.OpenQueue(ctx, d.cfg.queue)
	})
	return d.q, d.openErr
}

// Send sends m to the dispatcher's own queue, for code outside sagas (an
// HTTP handler, say) to start or feed a saga. A MessageID option makes
// retries of the same call idempotent within the queue's duplicate window.
func (d *Dispatcher) Send(ctx context.Context, m any, opts ...SendOption) (transport.SendResult, error) {
	return d.SendTo(ctx, d.queueName, m, opts...)
}

// SendTo sends m to queue, encoded as sagas' messages are.
func (d *Dispatcher) SendTo(ctx context.Context, queue string, m any, opts ...SendOption) (transport.SendResult, error) {
	if _, err := d.open(ctx); err != nil {
		return transport.SendResult{}, err
	}
	q, err := d.broker.Queue(ctx, queue)
	if err != nil {
		return transport.SendResult{}, err
	}
	body, err := d.cfg.codec.Marshal(m)
	if err != nil {
		return transport.SendResult{}, fmt.Errorf("saga: encoding %T: %w", m, err)
	}
	e := &envelope{Type: nameOf(m), Body: body, ContentType: d.cfg.codec.ContentType()}
	for _, o := range opts {
		o(e)
	}
	return q.Send(ctx, e.transportMessage())
}

// WithMessageID sets the outgoing message's MessageID (Dispatcher.Send
// only; messages sent by sagas get IDs derived from the step).
func WithMessageID(id string) SendOption { return func(e *envelope) { e.ID = id } }

// Run receives and handles messages until ctx ends, then stops receiving,
// lets the messages in flight finish (for at most the drain timeout) and
// returns nil. It returns an error if the queue cannot be opened.
func (d *Dispatcher) Run(ctx context.Context) error {
	q, err := d.open(ctx)
	if err != nil {
		return err
	}
	work := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for range d.cfg.concurrency {
		wg.Go(func() { d.worker(ctx, work, q) })
	}
	wg.Wait()
	return nil
}

func (d *Dispatcher) worker(ctx, work context.Context, q *transport.Queue) {
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		ds, err := q.Receive(ctx, 1)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, transport.ErrClosed) {
				return
			}
			d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: receive failed", slog.String("queue", d.queueName), slog.Any("error", err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
				backoff = min(2*backoff, 5*time.Second)
			}
			continue
		}
		backoff = 10 * time.Millisecond
		for _, del := range ds {
			wctx, cancel := context.WithTimeout(work, d.cfg.drain)
			d.Handle(wctx, del)
			cancel()
		}
	}
}

// Handle runs one received message through the sagas and settles it:
// complete, delayed retry or dead-letter. Run calls it; it is exported for
// custom receive loops, such as one that shares a queue with other
// consumers.
func (d *Dispatcher) Handle(ctx context.Context, del *transport.Delivery) {
	start := d.cfg.now()
	if _, err := d.open(ctx); err != nil {
		d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: cannot open queue; abandoning message", slog.String("queue", d.queueName), slog.Any("error", err))
		_ = del.Abandon(ctx)
		return
	}
	info := StepInfo{Queue: d.queueName, MessageType: del.Properties[propType], Seq: del.Seq, DeliveryCount: del.DeliveryCount}
	if h := d.cfg.hooks.StepStarted; h != nil {
		ctx = h(ctx, info)
	}
	res := d.handle(ctx, del, &info)
	res.Duration = d.cfg.now().Sub(start)
	if h := d.cfg.hooks.StepDone; h != nil {
		h(ctx, info, res)
	}
}

func (d *Dispatcher) handle(ctx context.Context, del *transport.Delivery, info *StepInfo) StepResult {
	targets, err := d.targets(del)
	if err != nil {
		return d.deadLetter(ctx, del, ReasonUnknownType, err)
	}
	identity := cmp.Or(del.Properties[propOrigin], del.MessageID, anonymousIdentity(d.queueName, del.Message))
	outcome, conflicts := Duplicate, 0
	for _, rt := range targets {
		info.Saga = rt.Name()
		var o Outcome
		var n int
		for attempt := 0; ; attempt++ {
			o, n, err = d.process(ctx, rt, del, identity, info)
			conflicts += n
			if err == nil || errors.Is(err, ErrPermanent) || attempt >= d.cfg.retry.Immediate {
				break
			}
		}
		if err != nil {
			res := d.fail(ctx, del, identity, err)
			res.Conflicts = conflicts
			return res
		}
		if o == Handled || o == Dropped && outcome == Duplicate {
			outcome = o
		}
	}
	if err := del.Complete(ctx); err != nil {
		d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: completing message failed; it will be redelivered and deduplicated",
			slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq), slog.Any("error", err))
		return StepResult{Outcome: Abandoned, Err: err, Conflicts: conflicts}
	}
	return StepResult{Outcome: outcome, Conflicts: conflicts}
}

// anonymousIdentity identifies a message sent without a MessageID: its
// sequence number is unique only within its queue (and queue lifetime), so
// the queue and the enqueue instant are part of it.
func anonymousIdentity(queue string, m *transport.Message) string {
	return "seq:" + queue + ":" + strconv.FormatUint(m.Seq, 10) + ":" + strconv.FormatInt(m.EnqueuedAt.UnixNano(), 10)
}

// targets returns the sagas a message goes to: the one named on a
// timeout, or every saga that starts or handles its type.
func (d *Dispatcher) targets(del *transport.Delivery) ([]sagaRuntime, error) {
	typ := del.Properties[propType]
	if name, ok := del.Properties[propSaga]; ok {
		rt, ok := d.byName[name]
		if !ok {
			return nil, fmt.Errorf("%w: timeout for saga %q, which this dispatcher does not run", ErrUnknownMessage, name)
		}
		if kind, ok := rt.lookup(typ); !ok || kind != routeTimeout {
			return nil, fmt.Errorf("%w: saga %s has no OnTimeout for %q", ErrUnknownMessage, name, typ)
		}
		return []sagaRuntime{rt}, nil
	}
	rts := d.byType[typ]
	if len(rts) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrUnknownMessage, typ)
	}
	return rts, nil
}

const maxIDLen = 512

// validateID accepts instance IDs of 1–512 bytes of UTF-8 without control
// characters: they travel in message properties and store keys.
func validateID(id string) error {
	if id == "" || len(id) > maxIDLen || !utf8.ValidString(id) {
		return fmt.Errorf("must be 1-%d bytes of UTF-8", maxIDLen)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("contains control character %U", r)
		}
	}
	return nil
}

// process runs one saga's handler for a message and commits the result,
// running it again on fresh state after a conflict. It returns the
// outcome and the number of conflicts met.
func (d *Dispatcher) process(ctx context.Context, rt sagaRuntime, del *transport.Delivery, identity string, info *StepInfo) (Outcome, int, error) {
	typ := del.Properties[propType]
	kind, _ := rt.lookup(typ)
	m, err := rt.decode(d.cfg.codec, typ, del.Body)
	if err != nil {
		return "", 0, Permanent(fmt.Errorf("%w: %s: %w", ErrMalformed, typ, err))
	}
	var id string
	if kind == routeTimeout {
		id = del.Properties[propSagaID]
	} else if id, err = rt.find(ctx, typ, m); err != nil {
		return "", 0, err
	}
	if err := validateID(id); err != nil {
		return "", 0, Permanent(fmt.Errorf("%w: saga %s: ID %.64q: %w", ErrCorrelation, rt.Name(), id, err))
	}
	info.ID = id
	key := storeKey(rt.Name(), id)
	waits := 0
	for conflicts := 0; ; {
		o, err := d.attempt(ctx, rt, kind, key, id, identity, del, m, waits < outboxWaits)
		if errors.Is(err, errOutboxBusy) {
			waits++
			select {
			case <-ctx.Done():
				return "", conflicts, context.Cause(ctx)
			case <-time.After(time.Millisecond << waits):
			}
			continue
		}
		if !errors.Is(err, ErrConflict) {
			return o, conflicts, err
		}
		if conflicts++; conflicts > d.cfg.conflicts {
			return "", conflicts, fmt.Errorf("saga %s/%s: gave up after %d conflicts: %w", rt.Name(), id, conflicts, err)
		}
	}
}

// A step that finds the outbox of a step committed moments ago waits a
// little (1, 2, 4, 8, 16 ms) for its owner to finish carrying it out,
// rather than carrying it out again: a message a step sends to its own
// queue is often received before the sending step has cleared its outbox.
// After that, or for an older outbox (its owner likely crashed), it takes
// the outbox over.
const (
	outboxWaits = 5
	outboxGrace = 5 * time.Second
)

var errOutboxBusy = errors.New("saga: outbox being carried out")

// attempt is one load → handle → commit → carry out effects round.
func (d *Dispatcher) attempt(ctx context.Context, rt sagaRuntime, kind routeKind, key, id, identity string, del *transport.Delivery, m any, patient bool) (Outcome, error) {
	now := d.cfg.now()
	raw, rev, err := d.store.Load(ctx, key)
	var rec *record
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return "", err
	default:
		if rec, err = decodeRecord(raw); err != nil {
			return "", Permanent(fmt.Errorf("saga %s/%s: stored record unreadable: %w", rt.Name(), id, err))
		}
		// Effects a crashed step committed but did not carry out go first:
		// the next commit would overwrite them.
		if len(rec.Outbox) > 0 {
			if patient && now.Sub(rec.Updated) < outboxGrace {
				return "", errOutboxBusy
			}
			if rev, err = d.flush(ctx, key, rec, rev); err != nil {
				return "", err
			}
		}
		if rec.seen(identity) {
			return Duplicate, nil
		}
		if rec.Completed {
			rec = &record{Inbox: rec.Inbox} // a finished instance: as if not found
		}
	}
	isNew := rec == nil || rec.Started.IsZero()
	if isNew && kind != routeStart {
		if kind == routeTimeout {
			return Dropped, nil
		}
		return d.notFound(ctx, rt, id, m)
	}
	if isNew {
		if rec == nil {
			rec = &record{}
		}
		rec.Started = now
		rec.Originator = &address{ReplyTo: del.ReplyTo, CorrelationID: cmp.Or(del.CorrelationID, del.MessageID)}
	}
	if kind == routeTimeout {
		token := del.Properties[propToken]
		if _, ok := rec.Timeouts[token]; !ok {
			return Dropped, nil // cancelled, rescheduled or already handled
		}
		delete(rec.Timeouts, token)
	}
	s := &step{d: d, sagaName: rt.Name(), id: id, key: key, identity: identity, in: del.Message, rec: rec, isNew: isNew, now: now, codec: d.cfg.codec}
	if err := runHandler(ctx, rt, s, del.Properties[propType], m); err != nil {
		return "", &HandlerError{Saga: rt.Name(), ID: id, Message: del.Properties[propType], Err: err}
	}
	rec.remember(identity)
	if rec.Completed {
		s.complete()
	}
	b, err := encodeRecord(rec)
	if err != nil {
		return "", err
	}
	if rev, err = d.store.Put(ctx, key, b, rev); err != nil {
		return "", err
	}
	if len(rec.Outbox) > 0 {
		if _, err := d.flush(ctx, key, rec, rev); err != nil && !errors.Is(err, ErrConflict) {
			return "", err
		}
	}
	return Handled, nil
}

func runHandler(ctx context.Context, rt sagaRuntime, s *step, typ string, m any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v\n%s", ErrPanic, p, debug.Stack())
		}
	}()
	return rt.run(ctx, s, typ, m)
}

// flush carries out the effects in rec.Outbox, whose IDs the committed
// record fixes, then stores rec without them (and with the refs of the
// timeouts it scheduled). Carrying out effects twice is harmless: sends
// and schedules are deduplicated by MessageID within the queue's duplicate
// window, and cancels are idempotent.
func (d *Dispatcher) flush(ctx context.Context, key string, rec *record, rev uint64) (uint64, error) {
	for _, e := range rec.Outbox {
		switch e.Kind {
		case effectSend:
			q, err := d.broker.Queue(ctx, e.Queue)
			if err != nil {
				return 0, err
			}
			if _, err := q.Send(ctx, e.Msg.transportMessage()); errors.Is(err, transport.ErrInvalidMessage) || errors.Is(err, transport.ErrMessageTooLarge) {
				d.dropEffect(ctx, key, e, err)
			} else if err != nil {
				return 0, fmt.Errorf("saga: sending %s to %s: %w", e.Msg.Type, e.Queue, err)
			}
		case effectSchedule:
			ref, err := d.cfg.timeouts.Schedule(ctx, timeout.Timeout{ID: e.Token, Queue: e.Queue, At: e.At, Message: e.Msg.transportMessage()})
			if errors.Is(err, transport.ErrInvalidMessage) || errors.Is(err, transport.ErrMessageTooLarge) {
				d.dropEffect(ctx, key, e, err)
				continue
			}
			if err != nil {
				return 0, fmt.Errorf("saga: scheduling timeout %s: %w", e.Msg.Type, err)
			}
			if te, ok := rec.Timeouts[e.Token]; ok {
				te.Ref = ref
				rec.Timeouts[e.Token] = te
			}
		case effectCancel:
			err := d.cfg.timeouts.Cancel(ctx, e.Ref)
			if err != nil && !errors.Is(err, timeout.ErrNotFound) && !errors.Is(err, timeout.ErrAlreadyFired) {
				return 0, fmt.Errorf("saga: cancelling timeout %s: %w", e.Ref, err)
			}
		}
	}
	rec.Outbox = nil
	b, err := encodeRecord(rec)
	if err != nil {
		return 0, err
	}
	return d.store.Put(ctx, key, b, rev)
}

// dropEffect logs an effect that can never be carried out (the step
// checks effects before commit, so only a record written otherwise has
// one) and leaves it out, so that it cannot block the instance forever.
func (d *Dispatcher) dropEffect(ctx context.Context, key string, e effect, err error) {
	d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: dropping an effect the transport refuses",
		slog.String("key", key), slog.String("kind", string(e.Kind)), slog.String("type", e.Msg.Type), slog.Any("error", err))
}

func (d *Dispatcher) notFound(ctx context.Context, rt sagaRuntime, id string, m any) (Outcome, error) {
	p := rt.policy()
	switch {
	case p.Hook != nil:
		if err := p.Hook(ctx, rt.Name(), id, m); err != nil {
			return "", err
		}
	case p.DeadLetter:
		return "", Permanent(fmt.Errorf("%w: saga %s/%s", ErrSagaNotFound, rt.Name(), id))
	default:
		d.cfg.logger.LogAttrs(ctx, slog.LevelDebug, "saga: no instance for message; ignored",
			slog.String("saga.type", rt.Name()), slog.String("saga.id", id))
	}
	return Dropped, nil
}

// fail settles a message whose handling failed: a delayed retry while the
// policy allows, else the dead-letter queue with the error.
func (d *Dispatcher) fail(ctx context.Context, del *transport.Delivery, identity string, err error) StepResult {
	switch {
	case errors.Is(err, ErrMalformed):
		return d.deadLetter(ctx, del, ReasonMalformed, err)
	case errors.Is(err, ErrSagaNotFound):
		return d.deadLetter(ctx, del, ReasonSagaNotFound, err)
	case errors.Is(err, ErrPermanent):
		return d.deadLetter(ctx, del, ReasonPermanent, err)
	}
	attempt, _ := strconv.Atoi(del.Properties[propAttempt])
	if attempt >= d.cfg.retry.Delayed {
		return d.deadLetter(ctx, del, ReasonRetriesExhausted, err)
	}
	delay := d.cfg.retry.Backoff(attempt + 1)
	retry := del.Message.Clone()
	retry.MessageID = effectID(identity, "retry", attempt+1)
	retry.Properties[propOrigin] = identity
	retry.Properties[propAttempt] = strconv.Itoa(attempt + 1)
	retry.ScheduledAt = time.Time{}
	if _, serr := d.q.Schedule(ctx, retry, d.cfg.now().Add(delay)); serr != nil {
		d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: scheduling a delayed retry failed; abandoning",
			slog.Uint64("seq", del.Seq), slog.Any("error", serr), slog.Any("cause", err))
		_ = del.Abandon(ctx)
		return StepResult{Outcome: Abandoned, Err: err}
	}
	d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: handler failed; retrying later",
		slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq), slog.Int("attempt", attempt+1),
		slog.Duration("delay", delay), slog.Any("error", err))
	if cerr := del.Complete(ctx); cerr != nil {
		return StepResult{Outcome: Abandoned, Err: err}
	}
	return StepResult{Outcome: Retried, Err: err}
}

func (d *Dispatcher) deadLetter(ctx context.Context, del *transport.Delivery, reason string, err error) StepResult {
	desc := err.Error()
	if len(desc) > 4000 {
		desc = desc[:4000]
	}
	desc = sanitize(desc)
	d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: message dead-lettered",
		slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq), slog.String("reason", reason), slog.Any("error", err))
	if derr := del.DeadLetter(ctx, reason, desc); derr != nil {
		_ = del.Abandon(ctx)
		return StepResult{Outcome: Abandoned, Err: errors.Join(err, derr)}
	}
	return StepResult{Outcome: DeadLettered, Err: err}
}

// sanitize replaces control characters, which a dead-letter description
// may not carry, with spaces.
func sanitize(s string) string {
	b := []rune(s)
	for i, r := range b {
		if r < 0x20 || r == 0x7f {
			b[i] = ' '
		}
	}
	return string(b)
}
