package saga

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// WithKeyLimit allows at most n steps in flight at once, on this
// dispatcher, for the messages of one PartitionKey (a tenant's, see
// PartitionKeyBy): a tenant whose work floods the queue takes at most n
// of the concurrency slots (WithConcurrency), and the other tenants'
// messages take the rest. Messages without a key are not limited.
// Default: 0, no limit.
//
// A worker never waits for a key at its limit: it sets the delivery
// aside, keeping its lock (renewed as a step's would be), and handles
// the next one; the delivery is handled, in the order it was received
// among its key's, as soon as one of its key's steps ends. When
// KeyLimitBacklog(concurrency, batch) deliveries of one partition of the
// queue are set aside, the workers stop receiving from that partition
// (transport.Queue.ReceiveFrom) until one is taken, and go on receiving
// from the others: a tenant's burst holds back its own partition, not the
// queue; on a queue of one partition they stop receiving. So no more than
// that many per partition are buffered (the batches the workers hold
// already may add one batch per worker, and timeouts held until their
// due time up to the 4096 Run holds at once). Set-aside deliveries that
// Run's end finds are abandoned, for redelivery at once.
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
// from that partition: two batches per worker.
func KeyLimitBacklog(concurrency, batch int) int { return 2 * concurrency * batch }

// keyLimiter counts the steps in flight per key and keeps the deliveries
// set aside for keys at their limit.
type keyLimiter struct {
	limit, backlog int

	mu       sync.Mutex
	inFlight map[string]int
	aside    map[string][]asideDelivery // per key, in the order received
	byPart   map[int]int                // set aside, per partition of the delivery's sequence number
	room     chan struct{}              // closed when a partition's count drops below backlog
	closed   bool                       // Run ended: set aside nothing more
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
	return &keyLimiter{limit: limit, backlog: backlog, inFlight: make(map[string]int), aside: make(map[string][]asideDelivery), byPart: make(map[int]int)}
}

// admit reports whether del, of key, may be handled now, counting it in
// flight; if not, it is set aside (or, once Run ended, abandon is
// true: the caller abandons it).
func (l *keyLimiter) admit(del *transport.Delivery, h holdPlan) (ok, abandon bool) {
	key := del.PartitionKey
	l.mu.Lock()
	defer l.mu.Unlock()
	if key == "" {
		return true, false
	}
	if l.inFlight[key] < l.limit {
		l.inFlight[key]++
		return true, false
	}
	if l.closed {
		return false, true
	}
	l.aside[key] = append(l.aside[key], asideDelivery{del: del, h: h, lock: time.Until(del.LockedUntil())})
	l.byPart[transport.Partition(del.Seq)]++
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
	if len(q) == 0 || l.closed {
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
	full := l.byPart[p] >= l.backlog
	if l.byPart[p]--; l.byPart[p] <= 0 {
		delete(l.byPart, p)
	}
	if full && l.byPart[p] < l.backlog && l.room != nil {
		close(l.room) // a partition held back has room again
		l.room = nil
	}
	return next, true
}

// waitRoom waits, before a worker receives from a queue or subscription
// of parts partitions, until fewer than the backlog of one of them are
// set aside, and returns those partitions (nil: all of them; see
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

// roomLocked returns the partitions, of parts, with fewer than the
// backlog set aside: nil if that is all of them.
func (l *keyLimiter) roomLocked(parts int) []int {
	full := 0
	for p, n := range l.byPart {
		if p < parts && n >= l.backlog {
			full++
		}
	}
	if full == 0 {
		return nil
	}
	from := make([]int, 0, parts-full)
	for p := range parts {
		if l.byPart[p] < l.backlog {
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
	if r.keys != nil {
		ok, abandon := r.keys.admit(del, h)
		if abandon {
			r.d.abandonUnstarted(r.work, del)
		}
		if !ok {
			return
		}
	}
	if !r.takeRenewing(ctx, slots, del, rest, lock) {
		r.d.abandonUnstarted(r.work, del) // Run stops
		if r.keys != nil {
			r.next(slots, del.PartitionKey)
		}
		return
	}
	r.handle(slots, del, h, rest)
	if r.keys != nil {
		r.next(slots, del.PartitionKey)
	}
}

// next ends a step of key and starts the next delivery set aside for it.
func (r *runner) next(slots chan struct{}, key string) {
	if a, ok := r.keys.release(key); ok {
		r.wg.Go(func() {
			if a.lock > 0 && time.Until(a.del.LockedUntil()) < a.lock*3/4 {
				// A step starts with most of a lock, as it would from a batch.
				_ = a.del.RenewLock(r.work)
			}
			r.take(slots)
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
