package sagatest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

// Queue is the name of the queue the Env's dispatcher receives from: where
// Env.Send delivers and where timeouts are scheduled.
const Queue = "sagatest"

// Option configures an Env.
type Option interface{ apply(*config) error }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	dispatcher []saga.Option
	codec      saga.Codec
	start      time.Time
	queues     []string
}

// WithDispatcherOptions passes options to saga.NewDispatcher, after the
// Env's own: saga.WithConcurrency(1) (steps run one at a time, in queue
// order, so that a run is deterministic) and a logger that discards.
// Three of saga's options concern the Env: use WithCodec instead of
// saga.WithCodec; saga.WithHooks replaces the hooks that feed the
// journal; and saga.WithQueueConfig may change the queue's timings and
// limits but not its shape (Partitions, RequiresSession).
func WithDispatcherOptions(opts ...saga.Option) Option {
	return optionFunc(func(c *config) error {
		for _, o := range opts {
			if o == nil {
				return errors.New("sagatest: nil dispatcher option")
			}
		}
		c.dispatcher = append(c.dispatcher, opts...)
		return nil
	})
}

// WithCodec sets the codec of message bodies and saga data, for the
// dispatcher and for the Env's decoding (State, Sent, AssertSent).
// Default: saga.JSON.
func WithCodec(codec saga.Codec) Option {
	return optionFunc(func(c *config) error {
		if codec == nil {
			return errors.New("sagatest: nil codec")
		}
		c.codec = codec
		return nil
	})
}

// WithStart moves the virtual clock to start before the dispatcher starts.
// Default: the bubble's epoch, midnight UTC 2000-01-01, which start may not
// precede.
func WithStart(start time.Time) Option {
	return optionFunc(func(c *config) error {
		if start.IsZero() {
			return errors.New("sagatest: zero start time")
		}
		c.start = start
		return nil
	})
}

// WithQueues names queues the sagas send to, so that the journal shows
// their messages from the start. A queue is also watched from the first
// call of Sent, Messages or AssertSent that names it; the journal then
// shows its earlier messages at the times they were sent.
func WithQueues(names ...string) Option {
	return optionFunc(func(c *config) error {
		for _, n := range names {
			if err := transport.ValidateQueueName(n); err != nil {
				return fmt.Errorf("sagatest: WithQueues: %w", err)
			}
		}
		c.queues = append(c.queues, names...)
		return nil
	})
}

// Env is a saga.Dispatcher running on the in-memory transport, the
// in-memory store and the transport's timeout engine, inside a
// testing/synctest bubble, where time is virtual. Run creates it; call
// its methods from the test's goroutine only.
type Env struct {
	t      *testing.T
	ctx    context.Context    // for the Env's own calls; never cancelled
	cancel context.CancelFunc // stops the dispatcher
	done   chan error
	b      *transport.Broker
	store  *memstore.Store
	d      *saga.Dispatcher
	q      *transport.Queue // the dispatcher's queue
	codec  saga.Codec
	start  time.Time

	mu       sync.Mutex
	events   []event
	snaps    map[instanceKey]*saga.Instance
	watched  map[string]*watchedQueue
	dead     watchedQueue // the dead-letter queue of q
	deadRead bool         // DeadLetters was called
	stopped  bool
}

// Run runs f inside a testing/synctest bubble with a fresh Env running
// sagas, and stops the Env when f returns. It then fails the test if
// anything was left behind: a message dead-lettered that the test did not
// look at (DeadLetters), or a timeout still scheduled for an instance
// that completed or no longer waits for it. The bubble itself fails the
// test if a goroutine started in it is still blocked.
//
// See the package documentation for the limits of the bubble.
func Run(t *testing.T, sagas []saga.Saga, f func(t *testing.T, env *Env), opts ...Option) {
	t.Helper()
	if len(sagas) == 0 {
		t.Fatal("sagatest: Run: no sagas")
	}
	var cfg config
	for _, o := range opts {
		if err := o.apply(&cfg); err != nil {
			t.Fatal(err)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		t.Helper()
		e := newEnv(t, sagas, cfg)
		f(t, e)
		e.settle()
	})
}

func newEnv(t *testing.T, sagas []saga.Saga, cfg config) *Env {
	t.Helper()
	if !cfg.start.IsZero() {
		d := time.Until(cfg.start)
		if d < 0 {
			t.Fatalf("sagatest: WithStart(%v): before the bubble's epoch %v", cfg.start, time.Now())
		}
		time.Sleep(d)
	}
	e := &Env{
		t: t, done: make(chan error, 1), codec: cfg.codec, start: time.Now(),
		snaps:   make(map[instanceKey]*saga.Instance),
		watched: make(map[string]*watchedQueue),
	}
	if e.codec == nil {
		e.codec = saga.JSON{}
	}
	e.ctx = context.Background()
	runCtx, cancel := context.WithCancel(e.ctx)
	e.cancel = cancel
	var err error
	if e.b, err = transport.NewMemory(); err != nil {
		t.Fatalf("sagatest: %v", err)
	}
	// Open the dispatcher's queue before the dispatcher does, so that it
	// applies its own config last.
	if e.q, err = e.b.OpenQueue(e.ctx, transport.QueueConfig{Name: Queue}); err != nil {
		t.Fatalf("sagatest: %v", err)
	}
	e.dead = watchedQueue{name: Queue + " dead letters", q: e.q.DeadLetterQueue(), next: 1}
	for _, name := range cfg.queues {
		e.watch(name)
	}
	e.store = memstore.New()
	dopts := []saga.Option{
		saga.WithSagas(sagas...),
		saga.WithConcurrency(1),
		saga.WithLogger(slog.New(slog.DiscardHandler)),
		saga.WithCodec(e.codec),
	}
	dopts = append(dopts, cfg.dispatcher...)
	dopts = append(dopts, saga.WithHooks(saga.Hooks{StepDone: e.stepDone}))
	if e.d, err = saga.NewDispatcher(e.b, e.store, Queue, dopts...); err != nil {
		t.Fatalf("sagatest: %v", err)
	}
	go func() { e.done <- e.d.Run(runCtx) }()
	t.Cleanup(e.stop)
	e.settle()
	return e
}

// stop stops the dispatcher and checks what it left behind.
func (e *Env) stop() {
	e.t.Helper()
	if !e.stopped {
		e.cancel()
		if err := <-e.done; err != nil {
			e.t.Errorf("sagatest: dispatcher: %v", err)
		}
		e.stopped = true
	}
	var leaks []string
	if !e.t.Failed() {
		leaks = e.leaks()
	}
	e.b.Close()
	if len(leaks) > 0 {
		e.t.Errorf("sagatest: at the end of the test:\n  %s\n%s", strings.Join(leaks, "\n  "), e.journalSection())
	}
}

// leaks lists what the test left behind: dead letters it did not look at,
// timeouts scheduled for instances that do not wait for them.
func (e *Env) leaks() []string {
	var out []string
	e.observe(&e.dead, -1)
	e.mu.Lock()
	ms, read := e.dead.msgs, e.deadRead
	e.mu.Unlock()
	if len(ms) > 0 && !read {
		out = append(out, fmt.Sprintf("%d message(s) dead-lettered, which the test did not look at (Env.DeadLetters)", len(ms)))
	}
	for st, err := range e.d.ScheduledTimeouts(e.ctx, "") {
		if err != nil {
			out = append(out, fmt.Sprintf("listing scheduled timeouts: %v", err))
			break
		}
		inst, err := e.d.Instance(e.ctx, st.Saga, st.ID)
		switch {
		case errors.Is(err, saga.ErrNotFound):
			out = append(out, fmt.Sprintf("timeout %s of %s/%s still scheduled for %s, but the instance does not exist", st.Type, st.Saga, st.ID, e.offset(st.At)))
		case err != nil:
			out = append(out, fmt.Sprintf("timeout %s of %s/%s: %v", st.Type, st.Saga, st.ID, err))
		case inst.Completed:
			out = append(out, fmt.Sprintf("timeout %s of %s/%s still scheduled for %s, but the instance completed", st.Type, st.Saga, st.ID, e.offset(st.At)))
		case !slices.ContainsFunc(inst.Timeouts, func(p saga.PendingTimeout) bool { return p.Type == st.Type }):
			out = append(out, fmt.Sprintf("timeout %s of %s/%s still scheduled for %s, but the instance no longer waits for it", st.Type, st.Saga, st.ID, e.offset(st.At)))
		}
	}
	return out
}

// settle waits until every goroutine in the bubble is blocked: the
// dispatcher has handled every message that is due.
func (e *Env) settle() {
	e.t.Helper()
	synctest.Wait()
	if e.stopped {
		return
	}
	select {
	case err := <-e.done:
		e.stopped = true
		e.t.Fatalf("sagatest: the dispatcher stopped: %v", err)
	default:
	}
	e.observeAll(-1)
}

// Settle waits until the dispatcher has handled every message that is
// due. Env's methods settle by themselves; call Settle after time.Sleep,
// or after code that sends through Dispatcher, before looking at the
// outcome some other way.
func (e *Env) Settle() {
	e.t.Helper()
	e.settle()
}

// Send sends m to the dispatcher's queue, as Dispatcher.Send does, and
// waits until it has been handled. It fails the test if the send fails.
func (e *Env) Send(m any, opts ...saga.SendOption) {
	e.t.Helper()
	// Journaled first: the dispatcher may handle m before Send returns.
	body, _ := e.codec.Marshal(m)
	e.record(0, time.Now(), fmt.Sprintf("test sent %s%s", messageName(m), bodySuffix(body)))
	if _, err := e.d.Send(e.ctx, m, opts...); err != nil {
		e.t.Fatalf("sagatest: Send(%T): %v", m, err)
	}
	e.settle()
}

// Advance moves the virtual clock forward by d and waits until the
// dispatcher has handled everything due by then. Timeouts due on the way
// fire at their own time, in order, and so do the timeouts their handlers
// request.
func (e *Env) Advance(d time.Duration) {
	e.t.Helper()
	if d < 0 {
		e.t.Fatalf("sagatest: Advance(%v): negative duration", d)
	}
	time.Sleep(d)
	e.settle()
}

// AdvanceTo moves the virtual clock forward to t, as Advance does. It
// fails the test if t is in the past.
func (e *Env) AdvanceTo(t time.Time) {
	e.t.Helper()
	d := time.Until(t)
	if d < 0 {
		e.t.Fatalf("sagatest: AdvanceTo(%v): %v in the past (now %s)", t, -d, e.offset(time.Now()))
	}
	time.Sleep(d)
	e.settle()
}

// Now returns the virtual time.
func (e *Env) Now() time.Time { return time.Now() }

// Start returns the virtual time at which the Env started; the journal
// shows times as offsets from it.
func (e *Env) Start() time.Time { return e.start }

// Dispatcher returns the Env's dispatcher, to hand to code under test that
// sends through it, or for its operator methods (Instance,
// CancelTimeouts, ...). Call Settle after using it directly.
func (e *Env) Dispatcher() *saga.Dispatcher { return e.d }

// Broker returns the Env's in-memory broker.
func (e *Env) Broker() *transport.Broker { return e.b }

// Exists reports whether an instance of s with this id is running: it
// started and has not completed.
func (e *Env) Exists(s saga.Saga, id string) bool {
	e.t.Helper()
	inst := e.instance(e.t, s, id)
	return inst != nil && !inst.Completed
}

// Completed reports whether the instance of s with this id completed
// (MarkComplete).
func (e *Env) Completed(s saga.Saga, id string) bool {
	e.t.Helper()
	inst := e.instance(e.t, s, id)
	return inst != nil && inst.Completed
}

// Timeouts returns the pending timeouts of an instance of s, by due time:
// those requested and not yet handled, cancelled or replaced. It returns
// nil for a missing or completed instance.
func (e *Env) Timeouts(s saga.Saga, id string) []saga.PendingTimeout {
	e.t.Helper()
	if inst := e.instance(e.t, s, id); inst != nil {
		return inst.Timeouts
	}
	return nil
}

// instance settles and loads an instance; nil if there is none.
func (e *Env) instance(t testing.TB, s saga.Saga, id string) *saga.Instance {
	t.Helper()
	e.settle()
	inst, err := e.d.Instance(e.ctx, s.Name(), id)
	if errors.Is(err, saga.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("sagatest: %s/%s: %v", s.Name(), id, err)
		return nil
	}
	return inst
}

// Messages returns the messages sent to queue since the Env started, in
// sequence order, with the facts the broker stamped on them (Seq,
// EnqueuedAt, ...). queue is one the sagas send to, which nothing
// receives from in the Env; not the dispatcher's own queue.
func (e *Env) Messages(queue string) []*transport.Message {
	e.t.Helper()
	e.settle()
	w := e.watch(queue)
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*transport.Message, len(w.msgs))
	for i, m := range w.msgs {
		out[i] = m.Clone()
	}
	return out
}

// DeadLetters returns the messages the dispatcher dead-lettered, in order,
// with DeadLetterReason and DeadLetterDescription. Calling it tells Run
// that the test looked at them.
func (e *Env) DeadLetters() []*transport.Message {
	e.t.Helper()
	e.settle()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.deadRead = true
	out := make([]*transport.Message, len(e.dead.msgs))
	for i, m := range e.dead.msgs {
		out[i] = m.Clone()
	}
	return out
}

// watchedQueue is a queue the Env reads: what it has seen so far.
type watchedQueue struct {
	name string
	q    *transport.Queue
	next uint64 // the first sequence number not yet seen
	msgs []*transport.Message
}

// watch starts watching a queue (if it is not watched yet) and reads it.
func (e *Env) watch(name string) *watchedQueue {
	e.t.Helper()
	if name == Queue {
		e.t.Fatalf("sagatest: queue %s is the dispatcher's own queue, whose messages it consumes; see Journal, Timeouts and DeadLetters", name)
	}
	e.mu.Lock()
	w, ok := e.watched[name]
	e.mu.Unlock()
	if !ok {
		// Open it as the dispatcher opens the queues it sends to.
		q, err := e.b.OpenQueue(e.ctx, transport.QueueConfig{Name: name})
		if err != nil {
			e.t.Fatalf("sagatest: watching queue %s: %v", name, err)
		}
		w = &watchedQueue{name: name, q: q, next: 1}
		e.mu.Lock()
		e.watched[name] = w
		e.mu.Unlock()
	}
	e.observe(w, -1)
	return w
}

// observeAll reads the new messages of every watched queue and of the
// dead-letter queue.
func (e *Env) observeAll(indent int) {
	e.mu.Lock()
	ws := make([]*watchedQueue, 0, len(e.watched))
	for _, w := range e.watched {
		ws = append(ws, w)
	}
	e.mu.Unlock()
	slices.SortFunc(ws, func(a, b *watchedQueue) int { return strings.Compare(a.name, b.name) })
	for _, w := range ws {
		e.observe(w, indent)
	}
	e.observe(&e.dead, -1)
}

// observe reads the messages sent to a watched queue since it last looked
// and journals them: with indent -1 at the time they were sent, else
// indented after the latest journal entry.
func (e *Env) observe(w *watchedQueue, indent int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range e.readNew(w) {
		w.msgs = append(w.msgs, m)
		var line string
		if w == &e.dead {
			line = fmt.Sprintf("dead-lettered %s: %s: %s", m.Properties[saga.TypeProperty], m.DeadLetterReason, firstLine(m.DeadLetterDescription))
		} else {
			line = fmt.Sprintf("sent %s to %s%s", m.Properties[saga.TypeProperty], w.name, bodySuffix(m.Body))
		}
		e.recordLocked(indent, m.EnqueuedAt, line)
	}
}

// readNew returns the active messages of w's queue not seen before. The
// queues the Env reads have one partition, so sequence numbers are 1, 2,
// 3, ...; scheduled messages (ScheduledBit) sort after them and are left
// until they activate. Call it with e.mu held.
func (e *Env) readNew(w *watchedQueue) []*transport.Message {
	const page = 256
	var out []*transport.Message
	for {
		ms, err := w.q.Peek(e.ctx, w.next, page)
		if err != nil {
			e.t.Errorf("sagatest: reading queue %s: %v", w.name, err)
			return out
		}
		for _, m := range ms {
			if m.State != transport.Active {
				return out
			}
			out = append(out, m)
			w.next = m.Seq + 1
		}
		if len(ms) < page {
			return out
		}
	}
}
