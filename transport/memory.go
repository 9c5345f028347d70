package transport

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// NewMemory returns a Broker that keeps queues in this process's memory.
// It keeps the same promises as the JetStream broker, on the clock set with
// WithClock (default: the time package, which is virtual inside a
// testing/synctest bubble), so a test can run a month of scheduled messages
// in milliseconds. Nothing survives the process. WithPrefix and
// WithAPITimeout are accepted and have no effect.
//
// Where the memory broker must choose, it is deterministic: a message
// scheduled for a time not after now activates within the Schedule call,
// Cancel knows every activation for as long as the queue lives, and
// AcceptNextSession picks the session whose oldest message has waited
// longest, preferring sessions no open SessionReceiver has accepted.
// Messages in a dead-letter queue are never dead-lettered again, however
// often they are delivered.
func NewMemory(opts ...Option) (*Broker, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	return &Broker{d: &memBroker{clock: o.clock, queues: make(map[string]*memQueue), topics: make(map[string]*memTopic)}}, nil
}

// errQueueDeleted is returned by the handles of a queue after DeleteQueue.
var errQueueDeleted = errors.New("transport: queue deleted")

// memBroker is the in-memory driver. Lock order: memBroker.mu before
// memQueue.mu.
type memBroker struct {
	clock  Clock
	mu     sync.Mutex
	queues map[string]*memQueue
	topics map[string]*memTopic
	closed bool
}

// enter locks b for an operation, or reports why it cannot run.
func (b *memBroker) enter(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	return nil
}

func (b *memBroker) openQueue(ctx context.Context, cfg QueueConfig) (queueDriver, error) {
	if err := b.enter(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	q, ok := b.queues[cfg.Name]
	if !ok {
		q = newMemQueue(b.clock, cfg)
		b.queues[cfg.Name] = q
	} else if err := q.reconfigure(cfg); err != nil {
		return nil, err
	}
	return q.main, nil
}

func (b *memBroker) attachQueue(ctx context.Context, name string) (queueDriver, QueueConfig, error) {
	if err := b.enter(ctx); err != nil {
		return nil, QueueConfig{}, err
	}
	defer b.mu.Unlock()
	q, ok := b.queues[name]
	if !ok {
		return nil, QueueConfig{}, fmt.Errorf("%w: %s", ErrQueueNotFound, name)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.main, q.cfg, nil
}

func (b *memBroker) deleteQueue(ctx context.Context, name string) error {
	if err := b.enter(ctx); err != nil {
		return err
	}
	q := b.queues[name]
	delete(b.queues, name)
	b.mu.Unlock()
	if q != nil {
		q.shutdown(errQueueDeleted)
	}
	return nil
}

func (b *memBroker) maxPayload() int64 { return DefaultMaxPayload }

// activationTick is 0: the memory broker activates a message at its time
// by its clock.
func (b *memBroker) activationTick() time.Duration { return 0 }

func (b *memBroker) close() error {
	b.mu.Lock()
	qs, ts := b.queues, b.topics
	b.queues, b.topics, b.closed = nil, nil, true
	b.mu.Unlock()
	for _, q := range qs {
		q.shutdown(ErrClosed)
	}
	for _, t := range ts {
		t.shutdown(ErrClosed)
	}
	return nil
}

// memQueue is one queue and its dead-letter queue under one mutex, so that
// moving a message between them is atomic.
type memQueue struct {
	clock Clock

	mu      sync.Mutex
	cfg     QueueConfig
	err     error         // why the queue is unusable: ErrClosed or errQueueDeleted
	changed chan struct{} // closed on a change of state; nil while no one waits
	main    *memLog
	dead    *memLog
}

func newMemQueue(clock Clock, cfg QueueConfig) *memQueue {
	q := &memQueue{clock: clock, cfg: cfg}
	q.dead = newMemLog(q, 1, nil)
	q.main = newMemLog(q, cfg.Partitions, q.dead)
	return q
}

// reconfigure applies cfg to an existing queue, refusing to change its shape.
func (q *memQueue) reconfigure(cfg QueueConfig) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if cfg.Partitions != q.cfg.Partitions || cfg.RequiresSession != q.cfg.RequiresSession {
		return fmt.Errorf("%w: queue %s exists with Partitions %d and RequiresSession %t",
			ErrInvalidConfig, q.cfg.Name, q.cfg.Partitions, q.cfg.RequiresSession)
	}
	q.cfg = cfg
	return nil
}

// shutdown makes every later operation fail with err, wakes all waiters
// and stops all timers.
func (q *memQueue) shutdown(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return
	}
	q.err = err
	for _, l := range []*memLog{q.main, q.dead} {
		for _, p := range l.parts {
			for _, e := range p.pending {
				e.stop()
			}
			for _, e := range p.active {
				if e.lock != nil {
					e.lock.stop()
				}
			}
		}
	}
	q.notify()
}

// enter locks q for an operation, or reports why the operation cannot run.
func (q *memQueue) enter(ctx context.Context) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	q.mu.Lock()
	if q.err != nil {
		q.mu.Unlock()
		return q.err
	}
	return nil
}

// await calls try under the lock until it reports success, waiting for a
// change of state in between. It fails when ctx ends or the queue shuts down.
func (q *memQueue) await(ctx context.Context, try func(now time.Time) bool) error {
	for {
		if err := q.enter(ctx); err != nil {
			return err
		}
		if try(q.clock.Now()) {
			q.mu.Unlock()
			return nil
		}
		if q.changed == nil {
			q.changed = make(chan struct{})
		}
		changed := q.changed
		q.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// notify wakes every waiter in await. Call it with q.mu held whenever a
// message may have become available.
func (q *memQueue) notify() {
	if q.changed != nil {
		close(q.changed)
		q.changed = nil
	}
}

// memLog holds the messages of a queue or of its dead-letter queue, and is
// the queueDriver of either.
type memLog struct {
	q        *memQueue
	parts    []*memPartition
	dlq      *memLog                // nil on a dead-letter queue
	rr       int                    // partition the next receive starts at
	sessions map[string]*memSession // the receiver holding each session
	// topic is set on a topic's log: it hands each message that becomes
	// active to the subscriptions (see memory_topic.go).
	topic *memTopic
	isSub bool // a subscription's log
}

func newMemLog(q *memQueue, partitions int, dlq *memLog) *memLog {
	l := &memLog{q: q, dlq: dlq, sessions: make(map[string]*memSession)}
	for i := range partitions {
		l.parts = append(l.parts, &memPartition{id: i, activated: make(map[uint64]struct{})})
	}
	return l
}

// memPartition is one partition: its active log and its schedule log.
type memPartition struct {
	id         int
	lastActive uint64      // last local seq of the active log
	lastSched  uint64      // last local seq of the schedule log
	active     []*memEntry // by Seq, locked ones included
	pending    []*memEntry // scheduled, by Seq
	activated  map[uint64]struct{}
	bytes      int64    // stored size of active messages, which MaxBytes caps
	dedup      memDedup // MessageIDs of sent and scheduled messages alike
	state      map[string]memState
}

// memEntry is a stored message.
type memEntry struct {
	m     *Message
	size  int
	count int         // deliveries so far
	lock  *memLock    // set while locked to a receiver
	stop  func() bool // stops the activation timer while pending
	// On a topic, how many subscriptions still hold the message; on a
	// subscription, what to call when the message leaves it.
	refs    *atomic.Int32
	release func()
}

// memLock is a receiver's lock on an entry. gen tells the current expiry
// timer from those that a renewal replaced.
type memLock struct {
	until time.Time
	gen   int
	stop  func() bool
}

// appendActive adds e to the active log as if enqueued at now, and returns
// its sequence number.
func (p *memPartition) appendActive(e *memEntry, now time.Time) uint64 {
	p.lastActive++
	e.m.Seq, e.m.EnqueuedAt, e.m.State = makeSeq(p.id, false, p.lastActive), now.UTC(), Active
	p.active = append(p.active, e)
	p.bytes += int64(e.size) // activations are never refused, even past MaxBytes
	return e.m.Seq
}

// sessionHead returns the oldest message of session id, or nil if the
// session has none or has a message locked.
func (p *memPartition) sessionHead(id string) *memEntry {
	var head *memEntry
	for _, e := range p.active {
		if e.m.SessionID != id {
			continue
		}
		if e.lock != nil {
			return nil
		}
		if head == nil {
			head = e
		}
	}
	return head
}

// memIndex finds seq in es, which is sorted by Seq.
func memIndex(es []*memEntry, seq uint64) (int, bool) {
	return slices.BinarySearchFunc(es, seq, func(e *memEntry, s uint64) int { return cmp.Compare(e.m.Seq, s) })
}
