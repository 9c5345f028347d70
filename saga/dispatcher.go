package saga

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
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

	records records // the store, behind the record cache unless it is off

	zones calendar.Zones // the zones of rules (RequestTimeoutBy), loaded once

	// mayKeepOutbox: outboxes of timeouts may stay in the stored record
	// (see carryOutInMemory). Not with several timeout engines: another
	// process (the jetsaga command, a dispatcher configured otherwise)
	// that loads the record carries such an outbox out again with its own
	// scheduler, which might route a timeout to another engine; there the
	// refs are recorded at once instead.
	mayKeepOutbox bool

	topicMu sync.Mutex
	topic   *transport.Topic // opened by openTopic

	onHold func(*transport.Delivery) // tests: called as a hold begins

	outage *circuit     // steps waiting for a dependency (circuit.go)
	kill   *killSwitch  // WithKillSwitch; nil: off
	calls  callOutcomes // outcomes of Calls of steps not committed yet (call.go)
	recent recentStats  // the last hour's steps, for the health record (recent.go)
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
		retention:   DefaultRetention,
		now:         time.Now,
		cacheSize:   DefaultRecordCache,
		batch:       8,
		versionWait: DefaultVersionWait,
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
		c.timeouts = timeout.NewQueue(b)
	}
	d := &Dispatcher{
		cfg: c, broker: b, store: store, queueName: queue, subscribers: c.subscribers,
		byType: make(map[string][]sagaRuntime), byName: make(map[string]sagaRuntime),
		records: storeRecords{store: store, retention: c.retention},
	}
	d.outage = newCircuit(d)
	d.kill = newKillSwitch(c.killSwitch, c.now)
	if ss, ok := store.(SchedulingStore); ok {
		sb, sq := ss.Queue()
		if eng, ok := c.timeouts.(*timeout.Queue); ok && eng.Broker() == b && sb == b && sq == queue {
			d.records = scheduledRecords{storeRecords: d.records.(storeRecords), store: ss, engine: eng, queue: queue}
		}
	}
	if _, units := store.(UnitStore); !units {
		if cache := newRecordCache(c.cacheSize); cache != nil {
			d.records = &cachedRecords{next: d.records, cache: cache}
		}
	} else {
		d.records = newUnitRecords(d.records, DefaultRecordCache)
	}
	if r, ok := c.timeouts.(*timeout.Router); !ok || len(r.Engines()) <= 1 {
		d.mayKeepOutbox = true
	}
	if len(c.sagas) == 0 {
		return nil, fmt.Errorf("%w: no sagas (use WithSagas)", ErrInvalidOption)
	}
	for _, s := range c.sagas {
		rt := s.runtime()
		if err := rt.validate(); err != nil {
			return nil, err
		}
		if r, ok := c.timeouts.(*timeout.Router); ok && rt.timeoutEngine() != "" && !slices.Contains(r.Engines(), rt.timeoutEngine()) {
			return nil, fmt.Errorf("%w: saga %s asks for timeout engine %q; the router has %q", ErrInvalidOption, rt.Name(), rt.timeoutEngine(), r.Engines())
		}
		if _, dup := d.byName[rt.Name()]; dup {
			return nil, fmt.Errorf("%w: saga %s registered twice", ErrInvalidDefinition, rt.Name())
		}
		d.byName[rt.Name()] = rt
		for _, mt := range rt.messageTypes() {
			d.byType[mt] = append(d.byType[mt], rt)
		}
	}
	if types := d.eventTypes(); c.topic != nil && len(types) > maxEventTypes {
		return nil, fmt.Errorf("%w: WithTopic: the sagas start or handle %d message types, a subscription filters on at most %d", ErrInvalidOption, len(types), maxEventTypes)
	}
	d.records = d.indexRecords(d.records)
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
	msg, err := d.Message(m, opts...)
	if err != nil {
		return transport.SendResult{}, err
	}
	return q.Send(ctx, msg)
}

// Message returns the transport message that Send and SendTo send for m,
// encoded as sagas' messages are, with opts applied, without sending it:
// for code that sends it another way, such as a transactional outbox
// (saga/pgstore/outbox).
func (d *Dispatcher) Message(m any, opts ...SendOption) (*transport.Message, error) {
	e, err := d.envelope(m, opts)
	if err != nil {
		return nil, err
	}
	return transportMessage(e), nil
}

// envelope encodes m, as sagas' messages are, with opts applied.
func (d *Dispatcher) envelope(m any, opts []SendOption) (*envelope, error) {
	body, err := d.cfg.codec.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("saga: encoding %T: %w", m, err)
	}
	e := &envelope{Type: nameOf(m), Body: body, ContentType: d.cfg.codec.ContentType()}
	for _, o := range opts {
		o(e)
	}
	return e, nil
}

// WithMessageID sets the outgoing message's MessageID (Dispatcher.Send
// only; messages sent by sagas get IDs derived from the step).
func WithMessageID(id string) SendOption { return func(e *envelope) { e.ID = id } }

// Run receives and handles messages until ctx ends, then stops receiving,
// lets the messages in flight finish (for at most the drain timeout) and
// returns nil. Timeouts activated early that it holds until their due
// time are in flight: it waits for them to come due (the engine's lead
// plus at most a second) and handles them. A step whose message is in its sagas' inboxes acknowledges
// it without waiting for the server's reply, so that acknowledgement may
// reach the server a moment after Run returned; if it is lost (the
// process exits at once), the message is redelivered and handled as the
// duplicate it is. It returns an error if the queue cannot be opened. It
// runs the services given with WithService beside the queue, and stops
// them (and waits for them) as it returns.
//
// Run never returns nil while ctx is live. A connection that is only
// disconnected is waited for: Run goes on receiving once it reconnects.
// A connection closed for good — nats.go gave up reconnecting (see
// transport.ReconnectForever, which never gives up), or the connection
// or the broker was closed — stops Run as ctx ending would (the steps in
// flight finish or fail), and Run logs it at Error and returns an error
// that matches transport.ErrClosed, so that a supervisor sees a failure,
// not a clean exit.
func (d *Dispatcher) Run(ctx context.Context) error {
	q, err := d.open(ctx)
	if err != nil {
		return err
	}
	defer d.runServices(ctx)()
	subs, err := d.subscribe(ctx)
	if err != nil {
		return err
	}
	work := context.WithoutCancel(ctx)
	// rctx also ends when a worker finds the connection closed for good
	// (see runner.closed), which stops the others as ctx ending would.
	rctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	r := newRunner(d, rctx, work, stop)
	var wg sync.WaitGroup
	wg.Go(func() { d.publishCatalog(rctx, q) }) // catalog.go
	wg.Go(func() { d.reportHealth(rctx, q) })   // health.go
	for range d.cfg.concurrency {
		wg.Go(func() { d.worker(rctx, r, r.slots, q, q.Config().Partitions, q.Config().LockDuration) })
	}
	for _, s := range subs {
		wg.Go(func() { d.runSubscription(rctx, r, s) })
	}
	stopKeys := r.startKeys(q.Config().LockDuration) // renews the locks of set-aside deliveries
	wg.Wait()
	stopKeys()  // abandons the deliveries set aside
	r.wg.Wait() // the timeouts held until their due time, the steps of set-aside deliveries
	if cause := context.Cause(rctx); ctx.Err() == nil && cause != nil {
		d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: dispatcher stopped: its connection closed for good",
			slog.String("queue", d.queueName), slog.Any("error", cause))
		return fmt.Errorf("saga: dispatcher of queue %q stopped: %w", d.queueName, cause)
	}
	return nil
}

// runServices starts the services given with WithService and returns the
// function that stops them and waits for them to return. A service's
// context ends when that function is called, not when ctx ends: a service
// keeps working while Run drains. A service that returns an error is
// logged at Error and not started again.
func (d *Dispatcher) runServices(ctx context.Context) (stop func()) {
	if len(d.cfg.services) == 0 {
		return func() {}
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for _, s := range d.cfg.services {
		wg.Go(func() {
			if err := s.Run(sctx); err != nil && sctx.Err() == nil {
				d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: a service stopped with an error",
					slog.String("service", fmt.Sprintf("%T", s)), slog.Any("error", err))
			}
		})
	}
	return func() {
		cancel()
		wg.Wait()
	}
}
