package saga

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// WithKeyLimit limits, on this dispatcher, the steps in flight at once
// for the messages of one PartitionKey (a tenant's, see PartitionKeyBy)
// to n while other keys' messages wait for a concurrency slot: a tenant
// whose work floods the queue then takes at most n of the slots
// (WithConcurrency), and the other tenants' messages take the rest.
// The limit is work-conserving: while no other key's message waits for a
// slot, a key may run more than n steps at once (a tenant alone uses
// every slot, as without the option), and as soon as another key's
// message waits, the limit applies again to the key's new steps (those
// already running finish; none is stopped). A message waits for a slot
// from when a worker received it (it may sit behind others in the
// worker's batch) until its step starts. Messages without a key are not
// limited, and count as another key's. Default: 0, no limit.
//
// With a key limit a worker runs the messages of its batch
// (WithReceiveBatch) at once, each in a concurrency slot as it gets one,
// rather than one after the other, and receives again once they have all
// been handled: on a queue of several partitions a batch holds several
// tenants' messages, and each would otherwise wait for the steps before it.
//
// A worker never waits for a key at its limit: it sets the delivery
// aside, keeping its lock (renewed as a step's would be), and handles
// the next one; the delivery is handled, in the order it was received
// among its key's, when one of its key's steps ends and the key is below
// its limit or no other key's message waits. When
// KeyLimitBacklog(concurrency, batch) deliveries of one partition of the
// queue are set aside, the workers stop receiving from that partition
// (transport.Queue.ReceiveFrom) until half of them have been taken, and
// go on receiving from the others: a tenant's burst holds back its own
// partition, not the queue; on a queue of one partition they stop
// receiving. So no more than that many per partition are buffered (the
// batches the workers hold already may add one batch per worker, and
// timeouts held until their due time up to the 4096 Run holds at once).
// Set-aside deliveries that Run's end finds are abandoned, for
// redelivery at once.
//
// The limit is per dispatcher: n in flight on each of several
// dispatchers of one queue. The key is the delivered message's
// PartitionKey, which a saga's timeouts and messages carry as their
// instance's key.
func WithKeyLimit(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 0 {
			return fmt.Errorf("%w: key limit %d: must be at least 0 (0: no limit)", ErrInvalidOption, n)
		}
		c.keyLimit = n
		return nil
	})
}

// KeyLimitBacklog is how many deliveries of one partition a dispatcher
// with WithKeyLimit sets aside at most before its workers stop receiving
// from that partition (they receive from it again once half of them
// have been taken): two batches per worker.
func KeyLimitBacklog(concurrency, batch int) int { return 2 * concurrency * batch }

// keyLimiter counts the steps in flight per key and keeps the deliveries
// set aside for keys at their limit.
type keyLimiter struct {
	limit, backlog int

	mu       sync.Mutex
	inFlight map[string]int
	aside    map[string][]asideDelivery // per key, in the order received
	byPart   map[int]int                // set aside, per partition of the delivery's sequence number
	heldBack map[int]bool               // partitions not received from: their backlog filled, and has not halved since
	room     chan struct{}              // closed when a partition held back has room again
	closed   bool                       // Run ended: set aside nothing more
	// Admitted deliveries waiting for a concurrency slot, per key and in
	// all (see waitSlot): while another key's wait, a key is held to its
	// limit.
	waiting  map[string]int
	waitings int
}

type asideDelivery struct {
	del  *transport.Delivery
	h    holdPlan
	lock time.Duration // its lock's length when set aside
}

func newKeyLimiter(limit, backlog int) *keyLimiter {
	if limit <= 0 {
		return nil
	}
	return &keyLimiter{limit: limit, backlog: backlog, inFlight: make(map[string]int), aside: make(map[string][]asideDelivery),
		byPart: make(map[int]int), heldBack: make(map[int]bool), waiting: make(map[string]int)}
}

// resume is how many set aside, of a partition held back, let the
// workers receive from it again: half the backlog. Resuming at the first
// one taken had them receive a batch or two, fill the backlog again and
// stop, over and over.
func (l *keyLimiter) resume() int { return l.backlog / 2 }

// waitSlot counts a delivery of key admitted (see admit) and waiting for
// a concurrency slot; gotSlot counts it out once it has one (or gave up).
func (l *keyLimiter) waitSlot(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiting[key]++
	l.waitings++
}

func (l *keyLimiter) gotSlot(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiting[key]--; l.waiting[key] <= 0 {
		delete(l.waiting, key)
	}
	l.waitings--
}

// othersWaitLocked reports whether a message of a key other than key
// waits for a slot: admitted ones (see waitSlot), and those of rest, the
// rest of the batch a worker handles in order.
func (l *keyLimiter) othersWaitLocked(key string, rest []*transport.Delivery) bool {
	if l.waitings > l.waiting[key] {
		return true
	}
	for _, d := range rest {
		if d.PartitionKey != key {
			return true
		}
	}
	return false
}

// admit reports whether del, of key, may be handled now, counting it in
// flight; if not, it is set aside (or, once Run ended, abandon is
// true: the caller abandons it). rest is the rest of del's batch, which
// waits behind it in its worker. A key below its limit is admitted; one
// at it or over it too while no other key's message waits for a slot
// (see WithKeyLimit), unless some of its deliveries are set aside already
// (they go first).
func (l *keyLimiter) admit(del *transport.Delivery, h holdPlan, rest []*transport.Delivery) (ok, abandon bool) {
	key := del.PartitionKey
	l.mu.Lock()
	defer l.mu.Unlock()
	if key == "" {
		return true, false
	}
	if len(l.aside[key]) == 0 && (l.inFlight[key] < l.limit || !l.othersWaitLocked(key, rest)) {
		l.inFlight[key]++
		return true, false
	}
	if l.closed {
		return false, true
	}
	l.aside[key] = append(l.aside[key], asideDelivery{del: del, h: h, lock: time.Until(del.LockedUntil())})
	p := transport.Partition(del.Seq)
	if l.byPart[p]++; l.byPart[p] >= l.backlog {
		l.heldBack[p] = true
	}
	return false, false
}

// release ends a step of key and returns the next delivery set aside for
// key, already counted in flight, if there is one.
func (l *keyLimiter) release(key string) (asideDelivery, bool) {
	if key == "" {
		return asideDelivery{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.aside[key]
	if len(q) == 0 || l.closed || (l.inFlight[key] > l.limit && l.othersWaitLocked(key, nil)) {
		// Over its limit while others wait: the step is not replaced.
		if l.inFlight[key]--; l.inFlight[key] <= 0 {
			delete(l.inFlight, key) // a million keys seen once cost nothing after
		}
		return asideDelivery{}, false
	}
	next := q[0]
	q[0] = asideDelivery{}
	if q = q[1:]; len(q) == 0 {
		delete(l.aside, key)
	} else {
		l.aside[key] = q
	}
	p := transport.Partition(next.del.Seq)
	if l.byPart[p]--; l.byPart[p] <= 0 {
		delete(l.byPart, p)
	}
	if l.heldBack[p] && l.byPart[p] <= l.resume() {
		delete(l.heldBack, p)
		if l.room != nil {
			close(l.room) // a partition held back has room again
			l.room = nil
		}
	}
	return next, true
}

// waitRoom waits, before a worker receives from a queue or subscription
// of parts partitions, until one of them is not held back (a partition
// is held back once the backlog of its deliveries is set aside, until
// half of them have been taken), and returns those partitions (nil: all of them; see
// WithKeyLimit) and, if it left some out, a channel closed when one of
// those has room again; false if ctx ended first. Partitions are told
// apart by number only, so a subscription's partition is held back with
// the queue's of the same number.
func (l *keyLimiter) waitRoom(ctx context.Context, parts int) (from []int, wake <-chan struct{}, ok bool) {
	if l == nil {
		return nil, nil, true
	}
	for {
		l.mu.Lock()
		from := l.roomLocked(parts)
		if from != nil && l.room == nil {
			l.room = make(chan struct{})
		}
		room := l.room
		l.mu.Unlock()
		if from == nil || len(from) > 0 {
			return from, room, true
		}
		select {
		case <-room:
		case <-ctx.Done():
			return nil, nil, false
		}
	}
}

// roomLocked returns the partitions, of parts, not held back: nil if
// that is all of them.
func (l *keyLimiter) roomLocked(parts int) []int {
	full := 0
	for p := range l.heldBack {
		if p < parts {
			full++
		}
	}
	if full == 0 {
		return nil
	}
	from := make([]int, 0, parts-full)
	for p := range parts {
		if !l.heldBack[p] {
			from = append(from, p)
		}
	}
	return from
}

// renew renews the locks of the deliveries set aside that are half gone,
// as a worker does for the rest of its batch.
func (l *keyLimiter) renew(ctx context.Context) {
	l.mu.Lock()
	var due []*transport.Delivery
	for _, q := range l.aside {
		for _, a := range q {
			if a.lock > 0 && time.Until(a.del.LockedUntil()) < a.lock/2 {
				due = append(due, a.del)
			}
		}
	}
	l.mu.Unlock()
	for _, del := range due {
		_ = del.RenewLock(ctx)
	}
}

// renewLoop renews the locks of set-aside deliveries until ctx ends.
func (l *keyLimiter) renewLoop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			l.renew(ctx)
		}
	}
}

// close sets nothing more aside and returns what is set aside, for Run to
// abandon.
func (l *keyLimiter) close() []*transport.Delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	var out []*transport.Delivery
	for key, q := range l.aside {
		for _, a := range q {
			out = append(out, a.del)
		}
		delete(l.aside, key)
	}
	clear(l.byPart)
	clear(l.heldBack)
	if l.room != nil {
		close(l.room)
		l.room = nil
	}
	return out
}

// renewEvery is how often set-aside locks are looked at: a quarter of the
// shortest lock, within [10 ms, 1 s].
func renewEvery(lock time.Duration) time.Duration {
	return min(max(lock/4, 10*time.Millisecond), time.Second)
}

// dispatch runs del through the dispatcher in a concurrency slot, as
// runner.handle does, within its key's limit: a delivery over it is set
// aside, and each step that ends hands the next one set aside for its key
// to a goroutine. The slot is taken once del is admitted (takeRenewing,
// renewing the locks of del and rest, the rest of its batch, while it
// waits); if ctx ends first, del is abandoned.
func (r *runner) dispatch(ctx context.Context, slots chan struct{}, del *transport.Delivery, h holdPlan, rest []*transport.Delivery, lock time.Duration) {
	r.dispatchIn(ctx, nil, slots, del, h, rest, lock)
}

// dispatchIn is dispatch for a worker's batch: with a key limit, once del
// has its slot its step runs in a goroutine of steps, and dispatchIn
// returns, so that the batch's next delivery takes the next slot. A
// partitioned queue's batch holds several keys' messages, one or two of
// each partition; run one after the other, the last of a batch of eight
// waited for seven steps although slots were free. Without a key limit
// (or with steps nil) the step runs before dispatchIn returns.
func (r *runner) dispatchIn(ctx context.Context, steps *sync.WaitGroup, slots chan struct{}, del *transport.Delivery, h holdPlan, rest []*transport.Delivery, lock time.Duration) {
	if r.keys != nil {
		ok, abandon := r.keys.admit(del, h, rest)
		if abandon {
			r.d.abandonUnstarted(r.work, del)
		}
		if !ok {
			return
		}
		r.keys.waitSlot(del.PartitionKey)
	}
	took := r.takeRenewing(ctx, slots, del, rest, lock)
	if r.keys != nil {
		r.keys.gotSlot(del.PartitionKey)
	}
	if !took {
		r.d.abandonUnstarted(r.work, del) // Run stops
		if r.keys != nil {
			r.next(slots, del.PartitionKey)
		}
		return
	}
	if r.keys == nil {
		r.handle(slots, del, h, rest)
		return
	}
	step := func() {
		r.handle(slots, del, h, nil) // the rest renew their own locks
		r.next(slots, del.PartitionKey)
	}
	if steps == nil {
		step()
		return
	}
	steps.Go(step)
}

// next ends a step of key and starts the next delivery set aside for it.
func (r *runner) next(slots chan struct{}, key string) {
	if a, ok := r.keys.release(key); ok {
		r.wg.Go(func() {
			if a.lock > 0 && time.Until(a.del.LockedUntil()) < a.lock*3/4 {
				// A step starts with most of a lock, as it would from a batch.
				_ = a.del.RenewLock(r.work)
			}
			r.keys.waitSlot(key)
			r.take(slots)
			r.keys.gotSlot(key)
			r.handle(slots, a.del, a.h, nil)
			r.next(slots, key)
		})
	}
}

// startKeys starts renewing the locks of set-aside deliveries (lock is
// the queue's lock duration); the function it returns stops it and
// abandons what is still set aside.
func (r *runner) startKeys(lock time.Duration) (stop func()) {
	if r.keys == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(r.work)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.keys.renewLoop(ctx, renewEvery(lock))
	}()
	return func() {
		for _, del := range r.keys.close() {
			r.d.abandonUnstarted(r.work, del)
		}
		cancel()
		<-done
	}
}
