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

// memDedup remembers MessageIDs as the JetStream broker does: for the
// duplicate window after a message with the ID was accepted, while a
// scheduled message with it is pending, for the duplicate window after it
// activated, and for CancelRecordTTL after it was cancelled.
type memDedup struct {
	ids    map[string]*memSeen
	writes int // since the last sweep of expired IDs
}

type memSeen struct {
	until   time.Time // remembered until then, unless pending
	pending uint64    // the pending scheduled message with this ID, if any
}

// lookup reports whether id is remembered and, if a scheduled message with
// it is pending, that message's sequence number.
func (d *memDedup) lookup(id string, now time.Time) (pending uint64, dup bool) {
	s, ok := d.ids[id]
	switch {
	case id == "" || !ok:
		return 0, false
	case s.pending != 0:
		return s.pending, true
	case now.Before(s.until):
		return 0, true
	}
	delete(d.ids, id)
	return 0, false
}

// remember notes that a message with id was accepted, as pending
// scheduled message seq if seq is not 0, and keeps it at least until until.
func (d *memDedup) remember(id string, pending uint64, until time.Time) {
	if id == "" {
		return
	}
	if d.ids == nil {
		d.ids = make(map[string]*memSeen)
	}
	s, ok := d.ids[id]
	if !ok {
		s = &memSeen{}
		d.ids[id] = s
	}
	s.pending = pending
	if until.After(s.until) {
		s.until = until
	}
	if d.writes++; d.writes > 1024 && d.writes > len(d.ids) {
		d.sweep(until)
	}
}

// settle notes that the scheduled message with id is no longer pending,
// and keeps its ID until until.
func (d *memDedup) settle(id string, until time.Time) {
	if s, ok := d.ids[id]; ok {
		s.pending = 0
		if until.After(s.until) {
			s.until = until
		}
	}
}

// sweep forgets the IDs that expired before now.
func (d *memDedup) sweep(now time.Time) {
	for id, s := range d.ids {
		if s.pending == 0 && !now.Before(s.until) {
			delete(d.ids, id)
		}
	}
	d.writes = 0
}

func (l *memLog) send(ctx context.Context, m *Message, partition int) (SendResult, error) {
	return l.put(ctx, m, partition, time.Time{})
}

func (l *memLog) schedule(ctx context.Context, m *Message, partition int, at time.Time) (SendResult, error) {
	return l.put(ctx, m, partition, at)
}

// put stores a copy of m in partition p: active if at is zero, else
// scheduled for at.
func (l *memLog) put(ctx context.Context, m *Message, p int, at time.Time) (SendResult, error) {
	if l.dlq == nil {
		return SendResult{}, fmt.Errorf("%w: a dead-letter queue takes no new messages", ErrUnsupported)
	}
	c := m.Clone()
	if !at.IsZero() {
		c.ScheduledAt = at.UTC()
	}
	size := wireSize(c)
	if size > DefaultMaxPayload {
		return SendResult{}, fmt.Errorf("%w: %d bytes, max %d", ErrMessageTooLarge, size, DefaultMaxPayload)
	}
	if err := l.q.enter(ctx); err != nil {
		return SendResult{}, err
	}
	defer l.q.mu.Unlock()
	now, part, cfg := l.q.clock.Now(), l.parts[p], l.q.cfg
	if pending, dup := part.dedup.lookup(c.MessageID, now); dup {
		return SendResult{Seq: pending, Duplicate: true}, nil
	}
	if at.IsZero() && cfg.MaxBytes > 0 && part.bytes+int64(size) > cfg.MaxBytes {
		return SendResult{}, fmt.Errorf("%w: queue %s partition %d: MaxBytes %d reached", ErrQueueFull, cfg.Name, p, cfg.MaxBytes)
	}
	e := &memEntry{m: c, size: size}
	if at.IsZero() {
		part.appendActive(e, now)
		l.activated(part, e)
		part.dedup.remember(c.MessageID, 0, now.Add(cfg.DuplicateWindow))
		l.q.notify()
		// As on JetStream, where a message reaches the queue through the
		// schedule stream, Send does not report the active sequence number.
		return SendResult{}, nil
	}
	seq := l.addPending(part, e, now)
	if _, pending := memIndex(part.pending, seq); pending {
		part.dedup.remember(c.MessageID, seq, now.Add(cfg.DuplicateWindow))
	} else {
		part.dedup.remember(c.MessageID, 0, now.Add(cfg.DuplicateWindow))
	}
	return SendResult{Seq: seq}, nil
}

// addPending gives e a scheduled sequence number, which it returns, and
// arranges its activation at e.m.ScheduledAt; a due message activates at once.
func (l *memLog) addPending(p *memPartition, e *memEntry, now time.Time) uint64 {
	p.lastSched++
	seq := makeSeq(p.id, true, p.lastSched)
	e.m.Seq, e.m.EnqueuedAt, e.m.State = seq, now.UTC(), Scheduled
	p.pending = append(p.pending, e)
	l.activateWhenDue(p, e, now)
	return seq
}

// activateWhenDue activates the pending entry e if it is due, else sets a
// timer to call it again when it is.
func (l *memLog) activateWhenDue(p *memPartition, e *memEntry, now time.Time) {
	if d := e.m.ScheduledAt.Sub(now); d > 0 {
		e.stop = l.q.clock.AfterFunc(d, func() { l.onTimer(p, e) })
		return
	}
	i, _ := memIndex(p.pending, e.m.Seq)
	p.pending = slices.Delete(p.pending, i, i+1)
	p.activated[e.m.Seq] = struct{}{}
	p.dedup.settle(e.m.MessageID, now.Add(l.q.cfg.DuplicateWindow))
	p.appendActive(e, now)
	l.activated(p, e)
	l.q.notify()
}

// onTimer runs activateWhenDue from an activation timer, unless the entry was
// cancelled or the queue shut down meanwhile.
func (l *memLog) onTimer(p *memPartition, e *memEntry) {
	l.q.mu.Lock()
	defer l.q.mu.Unlock()
	if _, pending := memIndex(p.pending, e.m.Seq); pending && l.q.err == nil {
		l.activateWhenDue(p, e, l.q.clock.Now())
	}
}

func (l *memLog) cancel(ctx context.Context, seq uint64) error {
	if l.dlq == nil {
		return fmt.Errorf("%w: a dead-letter queue has no scheduled messages", ErrUnsupported)
	}
	if err := l.q.enter(ctx); err != nil {
		return err
	}
	defer l.q.mu.Unlock()
	if Partition(seq) >= len(l.parts) {
		return ErrNotFound
	}
	p := l.parts[Partition(seq)]
	if i, ok := memIndex(p.pending, seq); ok {
		e := p.pending[i]
		e.stop()
		p.pending = slices.Delete(p.pending, i, i+1)
		p.dedup.settle(e.m.MessageID, l.q.clock.Now().Add(l.q.cfg.CancelRecordTTL))
		return nil
	}
	if _, ok := p.activated[seq]; ok {
		return fmt.Errorf("%w: seq %d", ErrAlreadyActivated, seq)
	}
	return fmt.Errorf("%w: seq %d", ErrNotFound, seq)
}

func (l *memLog) peek(ctx context.Context, from uint64, max int) ([]*Message, error) {
	if err := l.q.enter(ctx); err != nil {
		return nil, err
	}
	defer l.q.mu.Unlock()
	var ms []*Message
	for _, p := range l.parts[min(Partition(from), len(l.parts)):] {
		for _, es := range [][]*memEntry{p.active, p.pending} {
			i, _ := memIndex(es, from)
			for _, e := range es[i:] {
				if len(ms) == max {
					return ms, nil
				}
				if e.refs != nil && e.refs.Load() == 0 {
					continue // no subscription holds it any more
				}
				ms = append(ms, e.m.Clone())
			}
		}
	}
	return ms, nil
}

func (l *memLog) receive(ctx context.Context, max int) ([]*Delivery, error) {
	var ds []*Delivery
	err := l.q.await(ctx, func(now time.Time) bool {
		for i := range l.parts {
			p := l.parts[(l.rr+i)%len(l.parts)]
			for j := 0; j < len(p.active) && len(ds) < max; {
				if p.active[j].lock != nil {
					j++
				} else if d := l.take(p, p.active[j], now); d != nil {
					ds = append(ds, d)
					j++
				} // else take removed p.active[j]: look at j again.
			}
		}
		l.rr++
		return len(ds) > 0
	})
	return ds, err
}

// take delivers e, locking it, or moves it to the dead-letter queue if it
// has had MaxDeliveryCount deliveries already and returns nil.
func (l *memLog) take(p *memPartition, e *memEntry, now time.Time) *Delivery {
	if max := l.q.cfg.MaxDeliveryCount; l.dlq != nil && e.count >= max {
		l.deadLetterEntry(p, e, ReasonMaxDeliveryCountExceeded, exhaustedDescription(e.count, max), nil, now)
		return nil
	}
	e.count++
	e.lock = &memLock{}
	l.relock(e, e.lock, now)
	return newDelivery(e.m.Clone(), e.count, e.lock.until, &memSettler{l: l, p: p, e: e, lock: e.lock})
}

// relock (re)starts lock's expiry timer, LockDuration from now.
func (l *memLog) relock(e *memEntry, lock *memLock, now time.Time) {
	if lock.stop != nil {
		lock.stop()
	}
	lock.gen++
	gen, d := lock.gen, l.q.cfg.LockDuration
	lock.until = now.Add(d)
	lock.stop = l.q.clock.AfterFunc(d, func() {
		l.q.mu.Lock()
		defer l.q.mu.Unlock()
		if l.q.err == nil && e.lock == lock && lock.gen == gen {
			e.lock = nil
			l.q.notify()
		}
	})
}

// unlock releases e's lock, if any.
func (l *memLog) unlock(e *memEntry) {
	if e.lock != nil {
		e.lock.stop()
		e.lock = nil
		l.q.notify()
	}
}

// remove deletes e from p's active log.
func (l *memLog) remove(p *memPartition, e *memEntry) {
	l.unlock(e)
	i, _ := memIndex(p.active, e.m.Seq)
	p.active = slices.Delete(p.active, i, i+1)
	p.bytes -= int64(e.size)
	if e.release != nil {
		e.release()
		e.release = nil
	}
	l.q.notify()
}

// deadLetterEntry moves e from p to the dead-letter queue.
func (l *memLog) deadLetterEntry(p *memPartition, e *memEntry, reason, description string, edit func(*Message), now time.Time) {
	l.remove(p, e)
	m := e.m
	if edit != nil {
		m = m.Clone()
		edit(m)
	}
	m.DeadLetterReason, m.DeadLetterDescription = reason, description
	m.DeadLetterSource, m.DeadLetterSeq = l.q.cfg.Name, m.Seq
	dp := l.dlq.parts[0]
	dp.appendActive(&memEntry{m: m, size: e.size}, now)
}

func (l *memLog) acceptSession(ctx context.Context, id string, partition int) (sessionDriver, error) {
	if err := l.q.enter(ctx); err != nil {
		return nil, err
	}
	defer l.q.mu.Unlock()
	now := l.q.clock.Now()
	if h := l.sessions[id]; h != nil && h.holds(now) {
		return nil, fmt.Errorf("%w: session %.64q", ErrSessionLocked, id)
	}
	s := &memSession{l: l, p: l.parts[partition], id: id}
	s.extend(now)
	l.sessions[id] = s
	return s, nil
}

func (l *memLog) nextSession(ctx context.Context) (string, error) {
	var id string
	err := l.q.await(ctx, func(time.Time) bool {
		id = l.freeSession()
		return id != ""
	})
	return id, err
}

// freeSession returns a session with messages, none of them locked, that
// no receiver holds: the one whose oldest message has waited longest. It
// returns "" if there is none.
func (l *memLog) freeSession() string {
	now := l.q.clock.Now()
	var best *memEntry
	for _, p := range l.parts {
		skip := make(map[string]bool) // sessions that are locked, held or whose head was seen
		for _, e := range p.active {
			if h := l.sessions[e.m.SessionID]; e.lock != nil || h != nil && h.holds(now) {
				skip[e.m.SessionID] = true
			}
		}
		for _, e := range p.active {
			if skip[e.m.SessionID] {
				continue
			}
			skip[e.m.SessionID] = true
			if best == nil || cmp.Or(
				e.m.EnqueuedAt.Compare(best.m.EnqueuedAt),
				cmp.Compare(e.m.Seq, best.m.Seq),
			) < 0 {
				best = e
			}
		}
	}
	if best == nil {
		return ""
	}
	return best.m.SessionID
}

func (l *memLog) deadLetter() queueDriver {
	if l.dlq == nil {
		return l
	}
	return l.dlq
}

// memSettler settles one delivery of an entry.
type memSettler struct {
	l    *memLog
	p    *memPartition
	e    *memEntry
	lock *memLock
}

// hold locks the queue if the delivery still holds its lock, and returns
// the time.
func (s *memSettler) hold(ctx context.Context) (time.Time, error) {
	if err := s.l.q.enter(ctx); err != nil {
		return time.Time{}, err
	}
	if s.e.lock != s.lock {
		s.l.q.mu.Unlock()
		return time.Time{}, ErrLockLost
	}
	return s.l.q.clock.Now(), nil
}

func (s *memSettler) complete(ctx context.Context) error {
	if _, err := s.hold(ctx); err != nil {
		return err
	}
	defer s.l.q.mu.Unlock()
	s.l.remove(s.p, s.e)
	return nil
}

// abandon gives the message back; abandoning its last delivery
// dead-letters it at once (as on JetStream).
func (s *memSettler) abandon(ctx context.Context) error {
	now, err := s.hold(ctx)
	if err != nil {
		return err
	}
	defer s.l.q.mu.Unlock()
	if max := s.l.q.cfg.MaxDeliveryCount; s.l.dlq != nil && s.e.count >= max {
		s.l.deadLetterEntry(s.p, s.e, ReasonMaxDeliveryCountExceeded, exhaustedDescription(s.e.count, max), nil, now)
		return nil
	}
	s.l.unlock(s.e)
	return nil
}

func (s *memSettler) deadLetter(ctx context.Context, reason, description string, edit func(*Message)) error {
	if s.l.dlq == nil {
		return fmt.Errorf("%w: dead-lettering from a dead-letter queue", ErrUnsupported)
	}
	now, err := s.hold(ctx)
	if err != nil {
		return err
	}
	defer s.l.q.mu.Unlock()
	s.l.deadLetterEntry(s.p, s.e, reason, description, edit, now)
	return nil
}

func (s *memSettler) renew(ctx context.Context) (time.Time, error) {
	now, err := s.hold(ctx)
	if err != nil {
		return time.Time{}, err
	}
	defer s.l.q.mu.Unlock()
	s.l.relock(s.e, s.lock, now)
	return s.lock.until, nil
}

// memSession receives one session's messages. Its fields past id are
// guarded by the queue's mutex.
type memSession struct {
	l       *memLog
	p       *memPartition
	id      string
	closed  bool
	until   time.Time   // when the session lock expires
	waiting int         // Receive calls waiting: the lock holds meanwhile
	stop    func() bool // stops the expiry timer
}

// holds reports whether s holds its session at now.
func (s *memSession) holds(now time.Time) bool {
	return !s.closed && s.l.sessions[s.id] == s && (s.waiting > 0 || now.Before(s.until))
}

// extend renews the session lock for LockDuration from now; at its
// expiry, waiters (AcceptNextSession) look again.
func (s *memSession) extend(now time.Time) {
	if s.stop != nil {
		s.stop()
	}
	d := s.l.q.cfg.LockDuration
	s.until = now.Add(d)
	s.stop = s.l.q.clock.AfterFunc(d, func() {
		s.l.q.mu.Lock()
		defer s.l.q.mu.Unlock()
		s.l.q.notify()
	})
}

func (s *memSession) receive(ctx context.Context) (*Delivery, error) {
	var d *Delivery
	entered, lost := false, false
	err := s.l.q.await(ctx, func(now time.Time) bool {
		if s.closed {
			return true
		}
		if !entered {
			if !s.holds(now) {
				lost = true
				return true
			}
			entered = true
			s.waiting++
		}
		d = s.next(now)
		return d != nil
	})
	if entered {
		s.l.q.mu.Lock()
		s.waiting--
		if !s.closed {
			s.extend(s.l.q.clock.Now())
		}
		s.l.q.mu.Unlock()
	}
	switch {
	case lost:
		return nil, fmt.Errorf("%w: session %.64q", ErrSessionLockLost, s.id)
	case err == nil && d == nil:
		err = ErrClosed
	}
	return d, err
}

func (s *memSession) renew(ctx context.Context) (time.Time, error) {
	if err := s.l.q.enter(ctx); err != nil {
		return time.Time{}, err
	}
	defer s.l.q.mu.Unlock()
	now := s.l.q.clock.Now()
	if s.closed {
		return time.Time{}, ErrClosed
	}
	if !s.holds(now) {
		return time.Time{}, fmt.Errorf("%w: session %.64q", ErrSessionLockLost, s.id)
	}
	s.extend(now)
	return s.until, nil
}

// next delivers the session's oldest message unless one of the session's
// messages is locked.
func (s *memSession) next(now time.Time) *Delivery {
	for {
		e := s.p.sessionHead(s.id)
		if e == nil {
			return nil
		}
		if d := s.l.take(s.p, e, now); d != nil {
			return d
		}
	}
}

func (s *memSession) close() error {
	s.l.q.mu.Lock()
	defer s.l.q.mu.Unlock()
	if !s.closed {
		s.closed = true
		if s.stop != nil {
			s.stop()
		}
		if s.l.sessions[s.id] == s {
			delete(s.l.sessions, s.id)
		}
		s.l.q.notify()
	}
	return nil
}
