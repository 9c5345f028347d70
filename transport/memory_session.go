package transport

import (
	"cmp"
	"context"
	"fmt"
	"time"
)

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
