package transport

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
)

// memTopic is a topic in memory: a queue's log (the topic's schedules
// and sequence numbers) whose every activated message is handed, under
// the topic's lock, to the subscriptions whose filter it passes. Each
// subscription is a memQueue of its own, holding copies with the topic's
// sequence numbers; the topic keeps a message while a copy of it lives.
// Lock order: memBroker.mu, the topic's memQueue.mu, a subscription's.
type memTopic struct {
	*memLog
	cfg  TopicConfig
	subs map[string]*memSub // guarded by the topic's mutex
	live atomic.Int64       // messages some subscription holds
}

type memSub struct {
	cfg SubscriptionConfig
	q   *memQueue
}

func (s *memSub) accepts(m *Message) bool {
	return s.cfg.Filter.matches(m) && (!s.cfg.RequiresSession || m.SessionID != "")
}

func (b *memBroker) openTopic(ctx context.Context, cfg TopicConfig, qc QueueConfig) (topicDriver, error) {
	if err := b.enter(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	t, ok := b.topics[cfg.Name]
	if !ok {
		q := newMemQueue(b.clock, qc)
		t = &memTopic{memLog: q.main, cfg: cfg, subs: make(map[string]*memSub)}
		q.main.topic = t
		b.topics[cfg.Name] = t
		return t, nil
	}
	if !slices.Equal(t.cfg.FilterProperties, cfg.FilterProperties) {
		return nil, fmt.Errorf("%w: topic %q has FilterProperties %q, config asks for %q",
			ErrInvalidConfig, cfg.Name, t.cfg.FilterProperties, cfg.FilterProperties)
	}
	if err := t.q.reconfigure(qc); err != nil {
		return nil, err
	}
	return t, nil
}

func (b *memBroker) attachTopic(ctx context.Context, name string) (topicDriver, TopicConfig, error) {
	if err := b.enter(ctx); err != nil {
		return nil, TopicConfig{}, err
	}
	defer b.mu.Unlock()
	t, ok := b.topics[name]
	if !ok {
		return nil, TopicConfig{}, fmt.Errorf("%w: topic %s", ErrTopicNotFound, name)
	}
	return t, t.cfg, nil
}

func (b *memBroker) deleteTopic(ctx context.Context, name string) error {
	if err := b.enter(ctx); err != nil {
		return err
	}
	t := b.topics[name]
	delete(b.topics, name)
	b.mu.Unlock()
	if t != nil {
		t.shutdown(errQueueDeleted)
	}
	return nil
}

// shutdown ends the topic and its subscriptions with err.
func (t *memTopic) shutdown(err error) {
	t.q.shutdown(err)
	t.q.mu.Lock()
	subs := t.subs
	t.subs = nil
	t.q.mu.Unlock()
	for _, s := range subs {
		s.q.shutdown(err)
	}
}

// activated hands e, which just became active on a topic's log, to the
// subscriptions. Called with the topic's mutex held.
func (l *memLog) activated(p *memPartition, e *memEntry) {
	if t := l.topic; t != nil {
		t.fanOut(p, e)
	}
}

func (t *memTopic) fanOut(p *memPartition, e *memEntry) {
	refs := new(atomic.Int32)
	release := func() {
		if refs.Add(-1) == 0 {
			t.live.Add(-1)
		}
	}
	// The topic holds one reference until every copy is made, so that a
	// copy completed meanwhile cannot make the count touch zero early.
	e.refs = refs
	refs.Store(1)
	t.live.Add(1)
	for _, s := range t.subs {
		if !s.accepts(e.m) {
			continue
		}
		s.q.mu.Lock()
		if s.q.err == nil {
			refs.Add(1)
			sp := s.q.main.parts[p.id]
			sp.active = append(sp.active, &memEntry{m: e.m.Clone(), size: e.size, release: release})
			sp.bytes += int64(e.size)
			s.q.notify()
		}
		s.q.mu.Unlock()
	}
	release()
	// Forget the messages no subscription holds any more, now and then.
	if n := len(p.active); n > 64 && n > 2*int(t.live.Load()) {
		p.active = slices.DeleteFunc(p.active, func(e *memEntry) bool {
			if e.refs.Load() == 0 {
				p.bytes -= int64(e.size)
				return true
			}
			return false
		})
	}
}

func (t *memTopic) openSubscription(ctx context.Context, name string, cfg SubscriptionConfig, qc QueueConfig) (queueDriver, error) {
	if err := t.q.enter(ctx); err != nil {
		return nil, err
	}
	defer t.q.mu.Unlock()
	if s, ok := t.subs[name]; ok {
		if !s.cfg.Filter.equal(cfg.Filter) || s.cfg.RequiresSession != cfg.RequiresSession {
			return nil, fmt.Errorf("%w: subscription %q of topic %q exists with Filter %+v and RequiresSession %t",
				ErrInvalidConfig, name, t.cfg.Name, s.cfg.Filter, s.cfg.RequiresSession)
		}
		if err := s.q.reconfigure(qc); err != nil {
			return nil, err
		}
		s.cfg = cfg
		return s.q.main, nil
	}
	s := &memSub{cfg: cfg, q: newMemQueue(t.q.clock, qc)}
	s.q.main.isSub = true
	t.subs[name] = s
	return s.q.main, nil
}

func (t *memTopic) attachSubscription(ctx context.Context, name string) (queueDriver, SubscriptionConfig, error) {
	if err := t.q.enter(ctx); err != nil {
		return nil, SubscriptionConfig{}, err
	}
	defer t.q.mu.Unlock()
	s, ok := t.subs[name]
	if !ok {
		return nil, SubscriptionConfig{}, fmt.Errorf("%w: subscription %s of topic %s", ErrTopicNotFound, name, t.cfg.Name)
	}
	return s.q.main, s.cfg, nil
}

func (t *memTopic) deleteSubscription(ctx context.Context, name string) error {
	if err := t.q.enter(ctx); err != nil {
		return err
	}
	s := t.subs[name]
	delete(t.subs, name)
	t.q.mu.Unlock()
	if s == nil {
		return nil
	}
	s.q.shutdown(errQueueDeleted)
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	for _, p := range s.q.main.parts {
		for _, e := range p.active {
			if e.release != nil {
				e.release()
				e.release = nil
			}
		}
	}
	return nil
}

func (t *memTopic) subscriptions(ctx context.Context) ([]string, error) {
	if err := t.q.enter(ctx); err != nil {
		return nil, err
	}
	defer t.q.mu.Unlock()
	var out []string
	for name := range t.subs {
		out = append(out, name)
	}
	return out, nil
}

// counts counts under the lock: exact at that instant.
func (l *memLog) counts(ctx context.Context) (Counts, error) {
	if err := l.q.enter(ctx); err != nil {
		return Counts{}, err
	}
	defer l.q.mu.Unlock()
	var c Counts
	for _, p := range l.parts {
		c.Active += int64(len(p.active))
		c.Scheduled += int64(len(p.pending))
		if l.isSub {
			for _, e := range p.active {
				if e.lock == nil && e.count == 0 {
					c.Pending++
				}
			}
		}
	}
	if l.topic != nil {
		c.Active = l.topic.live.Load()
	}
	if l.dlq != nil {
		c.DeadLettered = int64(len(l.dlq.parts[0].active))
	}
	return c, nil
}
