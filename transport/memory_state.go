package transport

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"
)

// memState is a state record in memory. Its revision is a local sequence
// number of its partition's schedule log, as on JetStream, where records and schedules
// share the schedule stream's sequence: never reused, and a commit's
// schedules follow its record.
type memState struct {
	value   []byte
	rev     uint64
	expires time.Time // zero: kept for good
}

// stateOf returns the record under key unless it expired by now (it is
// then forgotten).
func (p *memPartition) stateOf(key string, now time.Time) (memState, bool) {
	s, ok := p.state[key]
	if ok && !s.expires.IsZero() && !now.Before(s.expires) {
		delete(p.state, key)
		return memState{}, false
	}
	return s, ok
}

func (l *memLog) stateCheck() error {
	if l.dlq == nil || l.topic != nil || l.isSub {
		return fmt.Errorf("%w: state on a dead-letter queue or topic", ErrUnsupported)
	}
	return nil
}

func (l *memLog) loadState(ctx context.Context, key string, p int) ([]byte, uint64, error) {
	if err := l.stateCheck(); err != nil {
		return nil, 0, err
	}
	if err := l.q.enter(ctx); err != nil {
		return nil, 0, err
	}
	defer l.q.mu.Unlock()
	s, ok := l.parts[p].stateOf(key, l.q.clock.Now())
	if !ok {
		return nil, 0, fmt.Errorf("%w: %s", ErrStateNotFound, key)
	}
	return slices.Clone(s.value), s.rev, nil
}

func (l *memLog) commitState(ctx context.Context, c StateCommit, p int) (StateResult, error) {
	if err := l.stateCheck(); err != nil {
		return StateResult{}, err
	}
	if n := len(c.Value) + len(c.Key) + 256; n > DefaultMaxPayload {
		return StateResult{}, fmt.Errorf("%w: state record of %d bytes, max %d", ErrMessageTooLarge, len(c.Value), DefaultMaxPayload)
	}
	entries := make([]*memEntry, len(c.Schedule))
	for i, m := range c.Schedule {
		cp := m.Clone()
		cp.ScheduledAt = m.ScheduledAt.UTC()
		if size := wireSize(cp); size > DefaultMaxPayload {
			return StateResult{}, fmt.Errorf("%w: message %d: %d bytes, max %d", ErrMessageTooLarge, i, size, DefaultMaxPayload)
		}
		entries[i] = &memEntry{m: cp, size: wireSize(cp)}
	}
	if err := l.q.enter(ctx); err != nil {
		return StateResult{}, err
	}
	defer l.q.mu.Unlock()
	now, part := l.q.clock.Now(), l.parts[p]
	if s, ok := part.stateOf(c.Key, now); ok && s.rev != c.Rev || !ok && c.Rev != 0 {
		return StateResult{}, fmt.Errorf("%w: %s", ErrStateConflict, c.Key)
	}
	for i, e := range entries {
		if _, dup := part.dedup.lookup(e.m.MessageID, now); dup {
			return StateResult{}, fmt.Errorf("%w: message %d (MessageID %.64q)", ErrDuplicateMessage, i, e.m.MessageID)
		}
	}
	part.lastSched++
	s := memState{value: slices.Clone(c.Value), rev: part.lastSched}
	if c.TTL > 0 {
		s.expires = now.Add(c.TTL)
	}
	if part.state == nil {
		part.state = make(map[string]memState)
	}
	part.state[c.Key] = s
	r := StateResult{Rev: s.rev}
	for _, e := range entries {
		seq := l.addPending(part, e, now)
		if _, pending := memIndex(part.pending, seq); pending {
			part.dedup.remember(e.m.MessageID, seq, now.Add(l.q.cfg.DuplicateWindow))
		} else {
			part.dedup.remember(e.m.MessageID, 0, now.Add(l.q.cfg.DuplicateWindow))
		}
		r.Seqs = append(r.Seqs, seq)
	}
	return r, nil
}

func (l *memLog) deleteState(ctx context.Context, key string, rev uint64, p int) error {
	if err := l.stateCheck(); err != nil {
		return err
	}
	if err := l.q.enter(ctx); err != nil {
		return err
	}
	defer l.q.mu.Unlock()
	part := l.parts[p]
	s, ok := part.stateOf(key, l.q.clock.Now())
	switch {
	case !ok:
		return fmt.Errorf("%w: %s", ErrStateNotFound, key)
	case s.rev != rev:
		return fmt.Errorf("%w: %s is at revision %d, not %d", ErrStateConflict, key, s.rev, rev)
	}
	delete(part.state, key)
	return nil
}

func (l *memLog) stateKeys(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		if err := l.stateCheck(); err != nil {
			yield("", err)
			return
		}
		if err := l.q.enter(ctx); err != nil {
			yield("", err)
			return
		}
		now := l.q.clock.Now()
		var keys []string
		for _, part := range l.parts {
			for k := range part.state {
				if _, ok := part.stateOf(k, now); ok && strings.HasPrefix(k, prefix) {
					keys = append(keys, k)
				}
			}
		}
		l.q.mu.Unlock()
		for _, k := range keys {
			if !yield(k, nil) {
				return
			}
		}
	}
}

// stagesStateCommits is false: the memory broker commits in place.
func (b *memBroker) stagesStateCommits(QueueConfig) bool { return false }
