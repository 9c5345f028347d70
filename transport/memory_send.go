package transport

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// memDedup remembers MessageIDs as the JetStream broker does: for the
// duplicate window after a message with the ID was accepted, while a
// scheduled message with it is pending, for the duplicate window after it
// activated, and for CancelRecordTTL after it was cancelled.
type memDedup struct {
	ids    map[string]*memSeen
	writes int // since the last sweep of expired IDs
}

type memSeen struct {
	until     time.Time // remembered until then, unless pending
	pending   uint64    // the pending scheduled message with this ID, if any
	cancelled bool      // the scheduled message with this ID was cancelled
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
		return SendResult{Seq: pending, Duplicate: true, Cancelled: pending == 0 && part.dedup.ids[c.MessageID].cancelled}, nil
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
		if s, ok := p.dedup.ids[e.m.MessageID]; ok {
			s.cancelled = true
		}
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
