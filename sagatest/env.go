package sagatest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
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
	budget     int
	limit      int // WithJournalLimit; 0: DefaultJournalLimit
	explore    exploreConfig
}

// defaultStart is where the virtual clock starts unless WithStart says
// otherwise: Monday 1 January 2024, 00:00 UTC, a business day in most
// calendars' weekends (not a holiday: New Year's Day is one in many).
func defaultStart() time.Time { return time.Date(2024, time.January, 1, 0, 0, 0, 0, time.UTC) }

// DefaultStepBudget is how many steps the dispatcher may run during one
// call of Send, Advance, AdvanceTo or Settle unless WithStepBudget says
// otherwise.
const DefaultStepBudget = 10_000

// WithDispatcherOptions passes options to saga.NewDispatcher, after the
// Env's own: saga.WithConcurrency(1) (steps run one at a time, in queue
// order, so that a run is deterministic) and a logger that discards.
// Three of saga's options concern the Env: use WithCodec instead of
// saga.WithCodec; hooks given with saga.WithHooks are called, before the
// Env's own, which write the journal; and saga.WithQueueConfig may change
// the queue's timings and limits but not its shape (Partitions,
// RequiresSession). saga.WithDrainTimeout does not bound steps in the
// Env, which runs its own receive loop (see the package documentation).
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
// Default: Monday 2024-01-01 00:00 UTC (see the package documentation,
// "Time"). start may not precede the bubble's epoch, midnight UTC
// 2000-01-01.
func WithStart(start time.Time) Option {
	return optionFunc(func(c *config) error {
		if start.IsZero() {
			return errors.New("sagatest: zero start time")
		}
		c.start = start
		return nil
	})
}

// WithCalendars gives the dispatcher calendars, as saga.WithCalendars
// does: the registry that timeouts requested by a rule
// (saga.Context.RequestTimeoutBy) and re-plans (Env.Dispatcher's
// ReplanTimeouts) look calendars up in, and the current versions. As
// there, the current versions and the default calendar are fixed when
// the Env starts its dispatcher: a version added to reg in the test, to
// re-plan to, changes nothing for new requests; a calendar reg holds at
// several versions then needs its current one named (else Run fails the
// test with saga.ErrNoCurrentCalendar).
func WithCalendars(reg *calendar.Registry, current ...calendar.Ref) Option {
	return optionFunc(func(c *config) error {
		if reg == nil {
			return errors.New("sagatest: WithCalendars: nil registry")
		}
		c.dispatcher = append(c.dispatcher, saga.WithCalendars(reg, current...))
		return nil
	})
}

// WithStepBudget sets how many steps the dispatcher may run during one
// call of Send, Advance, AdvanceTo or Settle (or one input of Explore)
// before the Env stops it and fails the test: a handler that keeps
// requesting timeouts already due would otherwise hang the test, since
// the virtual clock moves only when every goroutine waits. Default:
// DefaultStepBudget.
func WithStepBudget(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("sagatest: WithStepBudget(%d): must be at least 1", n)
		}
		c.budget = n
		return nil
	})
}

// WithJournalLimit sets the longest body or state, in bytes, that the
// journal shows as it is; a longer one (or one that is not printable
// text) shows as its size, "state (283 bytes)". 0 shows text of any
// length. Default: DefaultJournalLimit.
func WithJournalLimit(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 0 {
			return fmt.Errorf("sagatest: WithJournalLimit(%d): must not be negative", n)
		}
		c.limit = n
		if n == 0 {
			c.limit = -1 // no limit, told apart from the default
		}
		return nil
	})
}

// WithQueues names queues to watch from the start. The Env watches every
// queue a step sends to from its first message, so the journal shows
// every message under the step that sent it; name here a queue that
// something other than a step sends to (code under test, through
// Env.Dispatcher). Sent, Messages and AssertSent watch the queue they
// name too.
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
	ctx    context.Context // for the Env's own calls; never cancelled
	b      *transport.Broker
	store  *memstore.Store
	d      *saga.Dispatcher
	q      *transport.Queue // the dispatcher's queue
	codec  saga.Codec
	start  time.Time
	budget int
	limit  int // of bodies in the journal; 0: none

	// The receive loop, which hands each message of q to the dispatcher
	// (Dispatcher.Handle); nil while paused.
	loopCancel context.CancelFunc
	loopDone   chan struct{}
	stopped    bool
	redelivery int            // redeliveries so far, to name their queues
	sends      int            // messages Send sent, to name them
	idPrefix   string         // of their MessageIDs, random: unique to the Env
	inputs     map[int]string // Explore's inputs, as resolved
	crash      *crashState    // the crash armed for the step in flight (Crash)

	// waitLock is held around synctest.Wait, which one goroutine of the
	// bubble at a time may call: by settle, and by the receive loop to
	// take what is ready at one instant (readyAtOnce).
	waitLock chan struct{}
	// quietDone: the receive loop, handed waitLock by settle (wantQuiet),
	// has waited and given it back.
	quietDone chan struct{}
	wantQuiet bool // under mu: the receive loop waits for waitLock from settle
	exploring bool // under mu: Explore holds deliveries (readyAtOnce)

	mu         sync.Mutex
	events     []event
	snaps      map[instanceKey]*saga.Instance
	watched    map[string]*watchedQueue
	sentTo     []string     // queues steps sent to, not yet watched
	dead       watchedQueue // the dead-letter queue of q
	deadRead   bool         // DeadLetters was called
	steps      int          // steps since the last drive call
	overBudget bool         // the loop stopped at the step budget
	loopErr    error        // why the loop stopped by itself
	caller     string       // the test line of the current drive call
	handled    []*transport.Message
	failures   []Failure
	failRead   bool // Failures was called
}

// Failure is a step that ended with an error: the handler failed (and the
// message was retried or dead-lettered), or the message could not be
// handled at all.
type Failure struct {
	At          time.Time // virtual time, UTC
	Saga, ID    string    // empty if no saga took the message
	MessageType string
	Outcome     saga.Outcome // saga.Retried, saga.DeadLettered, ...
	Err         error
	// Caller is the call of Send, Advance, AdvanceTo or Settle (or the
	// Explore input) during which the step ran, with its test line:
	// "Env.Send at file_test.go:42".
	Caller string
}

// Run runs f inside a testing/synctest bubble with a fresh Env running
// sagas, and stops the Env when f returns. It then fails the test if
// anything was left behind: a message dead-lettered, or a message still
// waiting for a delayed retry, that the test did not look at
// (DeadLetters, Failures), a timeout still scheduled for an instance
// that completed or no longer waits for it, or a stuck instance of a saga
// with saga.CheckLiveness (Env.Stuck). The bubble itself fails the
// test if a goroutine started in it is still blocked.
//
// See the package documentation for the limits of the bubble.
func Run(t *testing.T, sagas []saga.Saga, f func(t *testing.T, env *Env), opts ...Option) {
	t.Helper()
	cfg, ok := buildConfig(t, sagas, opts)
	if !ok {
		return
	}
	synctest.Test(t, func(t *testing.T) {
		t.Helper()
		e := newEnv(t, sagas, cfg)
		f(t, e)
		e.settle()
	})
}

func buildConfig(t *testing.T, sagas []saga.Saga, opts []Option) (config, bool) {
	t.Helper()
	var cfg config
	if len(sagas) == 0 {
		t.Fatal("sagatest: no sagas")
		return cfg, false
	}
	for _, o := range opts {
		if o == nil {
			t.Fatal("sagatest: nil option")
			return cfg, false
		}
		if err := o.apply(&cfg); err != nil {
			t.Fatal(err)
			return cfg, false
		}
	}
	if cfg.budget == 0 {
		cfg.budget = DefaultStepBudget
	}
	return cfg, true
}

func newEnv(t *testing.T, sagas []saga.Saga, cfg config) *Env {
	t.Helper()
	if cfg.start.IsZero() {
		cfg.start = defaultStart()
	}
	d := time.Until(cfg.start)
	if d < 0 {
		t.Fatalf("sagatest: WithStart(%v): before the bubble's epoch %v", cfg.start, time.Now().UTC())
	}
	time.Sleep(d)
	e := &Env{
		t: t, codec: cfg.codec, start: time.Now().UTC(), budget: cfg.budget, limit: cfg.limit,
		snaps:     make(map[instanceKey]*saga.Instance),
		waitLock:  make(chan struct{}, 1),
		quietDone: make(chan struct{}, 1),
		watched:   make(map[string]*watchedQueue),
		// 40 random bits: Envs, and the records they leave (StoredRecord),
		// do not share MessageIDs.
		idPrefix: strings.ToLower(rand.Text()[:8]),
	}
	if e.codec == nil {
		e.codec = saga.JSON{}
	}
	switch e.limit {
	case 0:
		e.limit = DefaultJournalLimit
	case -1:
		e.limit = 0
	}
	e.ctx = context.Background()
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
	// saga.WithHooks adds to the hooks given before it: the user's run
	// first, then the journal's.
	dopts = append(dopts, saga.WithHooks(saga.Hooks{StepDone: e.stepDone, Sent: e.sent}))
	if e.d, err = saga.NewDispatcher(e.b, crashStore{e.store, e}, Queue, dopts...); err != nil {
		t.Fatalf("sagatest: %v", err)
	}
	if err := e.d.Open(e.ctx); err != nil {
		t.Fatalf("sagatest: %v", err)
	}
	t.Cleanup(e.stop)
	e.resume()
	e.settle()
	return e
}

// drainTimeout bounds each step, as saga.Dispatcher.Run's default does.
const drainTimeout = 30 * time.Second

// resume starts the receive loop.
func (e *Env) resume() {
	if e.loopCancel != nil || e.stopped {
		return
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	e.loopCancel, e.loopDone = cancel, done
	go func() {
		defer close(done)
		e.receiveLoop(ctx)
	}()
}

// pause stops the receive loop and waits until it has returned: the step
// in flight, if any, finishes first.
func (e *Env) pause() {
	if e.loopCancel == nil {
		return
	}
	e.loopCancel()
	<-e.loopDone
	e.loopCancel, e.loopDone = nil, nil
}

// receiveLoop is Dispatcher.Run's receive loop with one worker, which
// also counts steps against the budget. It serves what is ready at once
// (up to fairBatch messages) round-robin across PartitionKeys (see
// fairOrder).
func (e *Env) receiveLoop(ctx context.Context) {
	for {
		ds, err := e.q.Receive(ctx, fairBatch)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, transport.ErrClosed) {
				e.mu.Lock()
				e.loopErr = err
				e.mu.Unlock()
			}
			return
		}
		for _, del := range fairOrder(e.readyAtOnce(ctx, ds)) {
			if !e.admit() {
				<-ctx.Done() // settle reports it; stop ends it
				return
			}
			e.handle(del)
		}
	}
}

// admit counts a step against the budget and reports whether it may run.
func (e *Env) admit() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.steps >= e.budget {
		e.overBudget = true
		return false
	}
	e.steps++
	return true
}

// handle runs one message through the dispatcher.
func (e *Env) handle(del *transport.Delivery) {
	e.mu.Lock()
	e.handled = append(e.handled, del.Message)
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(e.ctx, drainTimeout)
	defer cancel()
	e.d.Handle(ctx, del)
}

// stop stops the dispatcher and checks what it left behind.
func (e *Env) stop() {
	e.t.Helper()
	e.pause()
	e.stopped = true
	var leaks []string
	if !e.t.Failed() {
		leaks = e.leaks()
	}
	e.b.Close()
	if len(leaks) > 0 {
		e.t.Errorf("sagatest: at the end of the test:\n  %s\n%s", strings.Join(leaks, "\n  "), e.journalSection())
	}
}

// leaks lists what the test left behind: failures it did not look at,
// timeouts scheduled for instances that do not wait for them.
func (e *Env) leaks() []string {
	var out []string
	e.observe(&e.dead, -1)
	e.mu.Lock()
	dead, deadRead := e.dead.msgs, e.deadRead
	failures, failRead := slices.Clone(e.failures), e.failRead
	e.mu.Unlock()
	if len(dead) > 0 && !deadRead && !failRead {
		out = append(out, fmt.Sprintf("%d message(s) dead-lettered, which the test did not look at (Env.DeadLetters):", len(dead)))
		// The dispatcher dead-letters in a step: the k-th dead letter is
		// the k-th step that ended so.
		var steps []Failure
		for _, f := range failures {
			if f.Outcome == saga.DeadLettered {
				steps = append(steps, f)
			}
		}
		for i, m := range dead {
			line := fmt.Sprintf("  %s at %s: %s: %s", m.Properties[saga.TypeProperty], e.offset(m.EnqueuedAt), m.DeadLetterReason, firstLine(m.DeadLetterDescription))
			if len(steps) == len(dead) && steps[i].Caller != "" {
				line += " (during " + steps[i].Caller + ")"
			}
			out = append(out, line)
		}
	}
	out = append(out, e.stuckLeaks()...)
	timeouts := make(map[uint64]saga.ScheduledTimeout)
	for st, err := range e.d.ScheduledTimeouts(e.ctx, "") {
		if err != nil {
			out = append(out, fmt.Sprintf("listing scheduled timeouts: %v", err))
			return out
		}
		timeouts[st.Seq] = st
	}
	for m, err := range e.q.Browse(e.ctx, 0) {
		if err != nil {
			out = append(out, fmt.Sprintf("browsing queue %s: %v", Queue, err))
			break
		}
		if m.State != transport.Scheduled {
			continue
		}
		typ := m.Properties[saga.TypeProperty]
		// A delayed retry of a failed step is scheduled by that step.
		if i := slices.IndexFunc(failures, func(f Failure) bool {
			return f.Outcome == saga.Retried && f.MessageType == typ && f.At.Equal(m.EnqueuedAt)
		}); i >= 0 {
			if !failRead {
				out = append(out, fmt.Sprintf("%s failed and waits for a delayed retry at %s, which the test did not look at (Env.Failures): %s (during %s)",
					typ, e.offset(m.ScheduledAt), firstLine(failures[i].Err.Error()), failures[i].Caller))
			}
			continue
		}
		st, ok := timeouts[m.Seq]
		if !ok {
			continue // scheduled by the test
		}
		inst, err := e.d.Instance(e.ctx, st.Saga, st.ID)
		switch {
		case errors.Is(err, saga.ErrNotFound):
			out = append(out, fmt.Sprintf("timeout %s of %s/%s still scheduled for %s, but the instance does not exist", st.Type, st.Saga, st.ID, e.offset(st.At)))
		case err != nil:
			out = append(out, fmt.Sprintf("timeout %s of %s/%s: %v", st.Type, st.Saga, st.ID, err))
		case inst.Completed:
			out = append(out, fmt.Sprintf("timeout %s of %s/%s still scheduled for %s, but the instance completed", st.Type, st.Saga, st.ID, e.offset(st.At)))
		case !slices.ContainsFunc(inst.Timeouts, func(p saga.PendingTimeout) bool {
			return p.Handle == st.Handle && p.At.Equal(st.At) // a re-planned timeout's old message is not waited for
		}):
			out = append(out, fmt.Sprintf("timeout %s of %s/%s still scheduled for %s, but the instance no longer waits for it", st.Type, st.Saga, st.ID, e.offset(st.At)))
		}
	}
	return out
}

// drive starts a call that moves the Env on: it resets the step budget
// and remembers the test line that made it, for failure reports.
func (e *Env) drive() {
	caller := ""
	if pc, _, _, ok := runtime.Caller(1); ok {
		name := runtime.FuncForPC(pc).Name()
		name = name[strings.LastIndex(name, "/")+1:]                                 // sagatest.(*Env).Send
		caller = strings.NewReplacer("sagatest.", "", "(*Env)", "Env").Replace(name) // Env.Send
	}
	if _, file, line, ok := runtime.Caller(2); ok {
		caller = strings.TrimSpace(fmt.Sprintf("%s at %s:%d", caller, filepath.Base(file), line))
	}
	e.mu.Lock()
	e.steps, e.caller = 0, caller
	e.mu.Unlock()
}

// settle waits until every goroutine in the bubble is blocked: the
// dispatcher has handled every message that is due.
func (e *Env) settle() {
	e.t.Helper()
	for {
		e.waitLock <- struct{}{}
		synctest.Wait()
		e.mu.Lock()
		want := e.wantQuiet
		e.mu.Unlock()
		<-e.waitLock
		if !want {
			break
		}
		<-e.quietDone // the receive loop takes what is ready at this instant
	}
	if e.stopped {
		return
	}
	e.mu.Lock()
	over, loopErr, caller := e.overBudget, e.loopErr, e.caller
	e.mu.Unlock()
	if loopErr != nil {
		e.t.Fatalf("sagatest: receiving from %s: %v", Queue, loopErr)
		return
	}
	e.observeAll(-1)
	if over {
		where := ""
		if caller != "" {
			where = " during " + caller
		}
		e.t.Fatalf("sagatest: the dispatcher ran %d steps%s without the test moving on, and was stopped at %s: "+
			"does a handler keep requesting timeouts that are already due, or sending itself messages? "+
			"Raise the limit with WithStepBudget if the steps are meant.\n%s",
			e.budget, where, e.offset(time.Now()), e.journalSection())
	}
}

// Settle waits until the dispatcher has handled every message that is
// due. Env's methods settle by themselves; call Settle after time.Sleep,
// or after code that sends through Dispatcher, before looking at the
// outcome some other way.
func (e *Env) Settle() {
	e.t.Helper()
	e.drive()
	e.settle()
}

// Send sends m to the dispatcher's queue, as Dispatcher.Send does, and
// waits until it has been handled. It fails the test if the send fails.
// Unless opts set one, m gets a MessageID unique to the Env,
// "sagatest-<env>-1", "sagatest-<env>-2", ... (<env> is drawn at random
// for each Env), so that Explore can redeliver it, and so that a record
// from another Env (Restore), whose inbox holds that Env's MessageIDs,
// does not take it for a duplicate.
func (e *Env) Send(m any, opts ...saga.SendOption) {
	e.t.Helper()
	e.drive()
	e.send(m, opts)
	e.settle()
}

func (e *Env) send(m any, opts []saga.SendOption) {
	e.t.Helper()
	// Journaled first: the dispatcher may handle m before Send returns.
	body, _ := e.codec.Marshal(m)
	e.mu.Lock()
	e.recordLocked(0, time.Now(), fmt.Sprintf("test sent %s%s", messageName(m), e.bodySuffix(body)))
	e.sends++
	id := fmt.Sprintf("sagatest-%s-%d", e.idPrefix, e.sends)
	e.mu.Unlock()
	opts = append([]saga.SendOption{saga.WithMessageID(id)}, opts...)
	if _, err := e.d.Send(e.ctx, m, opts...); err != nil {
		e.t.Fatalf("sagatest: Send(%T): %v", m, err)
	}
}

// Advance moves the virtual clock forward by d and waits until the
// dispatcher has handled everything due by then. Timeouts due on the way
// fire at their own time, in order, and so do the timeouts their handlers
// request, delayed retries included. It fails the test if d is negative.
func (e *Env) Advance(d time.Duration) {
	e.t.Helper()
	e.drive()
	if d < 0 {
		e.t.Fatalf("sagatest: Advance(%v): negative duration; the virtual clock only moves forward (now %s)", d, e.offset(time.Now()))
		return
	}
	time.Sleep(d)
	e.settle()
}

// AdvanceTo moves the virtual clock forward to t, as Advance does. It
// fails the test if t is in the past.
func (e *Env) AdvanceTo(t time.Time) {
	e.t.Helper()
	e.drive()
	d := time.Until(t)
	if d < 0 {
		e.t.Fatalf("sagatest: AdvanceTo(%v): %v in the past; the virtual clock only moves forward (now %s)", t.UTC(), -d, e.offset(time.Now()))
		return
	}
	time.Sleep(d)
	e.settle()
}

// Now returns the virtual time, in UTC and without a monotonic clock
// reading, as times come back from the store and from messages: what a
// handler's Context.Now returns at the same instant. (time.Now in the
// bubble returns the same instant in time.Local.)
func (e *Env) Now() time.Time { return time.Now().UTC() }

// Outage simulates an outage of d: the virtual clock moves on by d while
// the dispatcher handles nothing — timeouts come due and wait on the
// queue, as they would while the server or every dispatcher is down —
// then the dispatcher comes back and handles the backlog in queue order,
// which for timeouts is due order, and Outage returns once it has, with
// the clock at the end of the outage. Handlers see the time the outage
// ended (Context.Now), so timeouts due during it are late by up to d: what
// their types' catch-up policies (saga.CatchUp, saga.HandleLate) act on.
// It fails the test if d is negative.
func (e *Env) Outage(d time.Duration) {
	e.t.Helper()
	e.drive()
	if d < 0 {
		e.t.Fatalf("sagatest: Outage(%v): negative duration; the virtual clock only moves forward (now %s)", d, e.offset(time.Now()))
		return
	}
	e.settle()
	e.pause()
	e.mu.Lock()
	e.recordLocked(0, time.Now(), fmt.Sprintf("outage for %v: nothing handled", d))
	e.mu.Unlock()
	time.Sleep(d)
	synctest.Wait() // what comes due during the outage is on the queue
	e.mu.Lock()
	e.recordLocked(0, time.Now(), "outage over: the backlog arrives")
	e.mu.Unlock()
	e.resume()
	e.settle()
}

// Start returns the virtual time at which the Env started, in UTC; the
// journal shows times as offsets from it.
func (e *Env) Start() time.Time { return e.start }

// Dispatcher returns the Env's dispatcher, to hand to code under test that
// sends through it, or for its operator methods (Instance,
// CancelTimeouts, ...). Call Settle after using it directly. Do not call
// its Run or Handle: the Env runs its own receive loop.
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
// (MarkComplete). The Env remembers the completions it saw: an instance
// is still completed once the completed retention has passed and its
// tombstone is gone from the store (saga.WithCompletedRetention).
func (e *Env) Completed(s saga.Saga, id string) bool {
	e.t.Helper()
	inst := e.instance(e.t, s, id)
	return inst != nil && inst.Completed
}

// Timeouts returns the pending timeouts of an instance of s, by due time:
// those requested and not yet handled, cancelled or replaced. It returns
// nil if there are none, and for a missing or completed instance.
func (e *Env) Timeouts(s saga.Saga, id string) []saga.PendingTimeout {
	e.t.Helper()
	if inst := e.instance(e.t, s, id); inst != nil && !inst.Completed && len(inst.Timeouts) > 0 {
		return inst.Timeouts
	}
	return nil
}

// Find settles and returns the IDs of the running instances of s whose
// index holds the query's value (saga.Index, saga.Where), in ID order, as
// saga.Find finds them. An error of the query (an index s does not
// declare, a bad value) fails the test.
func (e *Env) Find(s saga.Saga, q saga.Query) []string {
	e.t.Helper()
	e.settle()
	var ids []string
	for inst, err := range saga.Find(e.ctx, e.d, s, q) {
		if err != nil {
			e.t.Fatalf("sagatest: Find in %s: %v", s.Name(), err)
			return nil
		}
		ids = append(ids, inst.ID)
	}
	return ids
}

// Failures returns the steps that ended with an error so far, in order:
// handler errors (retried or dead-lettered), undecodable or unknown
// messages. Calling it tells Run that the test looked at them, including
// dead letters and messages still waiting for a delayed retry.
func (e *Env) Failures() []Failure {
	e.t.Helper()
	e.settle()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failRead = true
	return slices.Clone(e.failures)
}

// instance settles and loads an instance; nil if there is none. An
// instance the Env saw complete whose tombstone is gone (the completed
// retention passed) is returned as a completed one.
func (e *Env) instance(t testing.TB, s saga.Saga, id string) *saga.Instance {
	t.Helper()
	e.settle()
	inst, err := e.d.Instance(e.ctx, s.Name(), id)
	if errors.Is(err, saga.ErrNotFound) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if snap := e.snaps[instanceKey{s.Name(), id}]; snap != nil && snap.Completed {
			return &saga.Instance{Saga: snap.Saga, ID: snap.ID, Completed: true, Started: snap.Started, Updated: snap.Updated, DataVersion: snap.DataVersion}
		}
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

// watchQuiet starts watching a queue from the dispatcher's goroutine,
// where the test may not be stopped: a failure is reported, not fatal.
func (e *Env) watchQuiet(name string) {
	e.mu.Lock()
	_, ok := e.watched[name]
	e.mu.Unlock()
	if ok {
		return
	}
	q, err := e.b.OpenQueue(e.ctx, transport.QueueConfig{Name: name})
	if err != nil {
		e.t.Errorf("sagatest: watching queue %s: %v", name, err)
		return
	}
	e.mu.Lock()
	if _, ok := e.watched[name]; !ok {
		e.watched[name] = &watchedQueue{name: name, q: q, next: 1}
	}
	e.mu.Unlock()
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
			line = fmt.Sprintf("sent %s to %s%s", m.Properties[saga.TypeProperty], w.name, e.bodySuffix(m.Body))
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
