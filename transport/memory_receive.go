package transport

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// receive takes up to max deliveries, one partition after the other in
// turn, starting at the partition after the one the previous receive
// started at: partitions with messages share the batch (see the
// transport's doc on partitions).
func (l *memLog) receive(ctx context.Context, max int, from []bool) ([]*Delivery, error) {
	var ds []*Delivery
	err := l.q.await(ctx, func(now time.Time) bool {
		var buf [8]int
		next := buf[:] // each partition's next entry to look at
		if len(l.parts) > len(buf) {
			next = make([]int, len(l.parts))
		}
		for more := true; more && len(ds) < max; {
			more = false
			for i := 0; i < len(l.parts) && len(ds) < max; i++ {
				pi := (l.rr + i) % len(l.parts)
				if from != nil && !from[pi] {
					continue
				}
				if d, ok := l.takeNext(l.parts[pi], &next[pi], now); ok {
					more = true
					if d != nil {
						ds = append(ds, d)
					}
				}
			}
		}
		l.rr++
		return len(ds) > 0
	})
	return ds, err
}

// takeNext takes the first unlocked entry of p at or after *j, and
// reports whether there was one: its delivery, or nil if take
// dead-lettered it instead.
func (l *memLog) takeNext(p *memPartition, j *int, now time.Time) (*Delivery, bool) {
	for *j < len(p.active) && p.active[*j].lock != nil {
		*j++
	}
	if *j >= len(p.active) {
		return nil, false
	}
	d := l.take(p, p.active[*j], now)
	if d != nil {
		*j++
	} // else take removed p.active[*j]: the next one is at *j now.
	return d, true
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

// completeNoWait completes at once: memory has nothing to wait for.
func (s *memSettler) completeNoWait(ctx context.Context) error { return s.complete(ctx) }

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
