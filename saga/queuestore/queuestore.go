package queuestore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// Store is a saga.SchedulingStore on a transport queue's state. It is
// safe for concurrent use.
type Store struct {
	b    *transport.Broker
	name string

	mu sync.Mutex
	q  *transport.Queue // once resolved (see queue)
}

var (
	_ saga.SchedulingStore = (*Store)(nil)
	_ saga.ListingStore    = (*Store)(nil)
)

// New returns a store on the state of the queue named queue on b. The
// queue is looked up (transport.Broker.Queue) at the first call that
// needs it; a dispatcher on the queue opens it before its first step.
func New(b *transport.Broker, queue string) *Store {
	return &Store{b: b, name: queue}
}

// Queue returns the broker and name of the store's queue.
func (s *Store) Queue() (*transport.Broker, string) { return s.b, s.name }

func (s *Store) queue(ctx context.Context) (*transport.Queue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.q != nil {
		return s.q, nil
	}
	q, err := s.b.Queue(ctx, s.name)
	if err != nil {
		return nil, fmt.Errorf("queuestore: queue %s: %w", s.name, err)
	}
	s.q = q
	return q, nil
}

// Load returns the record and its revision, or saga.ErrNotFound.
func (s *Store) Load(ctx context.Context, key string) ([]byte, uint64, error) {
	q, err := s.queue(ctx)
	if err != nil {
		return nil, 0, err
	}
	v, rev, err := q.LoadState(ctx, key)
	return v, rev, mapErr(key, err)
}

// Put stores value if the record's revision is rev (0: absent).
func (s *Store) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	return s.PutTTL(ctx, key, value, rev, 0)
}

// PutTTL is Put, and the record expires ttl after this write (whole
// seconds, rounded up); ttl 0 keeps it for good.
func (s *Store) PutTTL(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	n, _, err := s.PutScheduled(ctx, key, value, rev, ttl, nil)
	return n, err
}

// PutScheduled is PutTTL that also schedules msgs on the queue, in the
// same atomic write.
func (s *Store) PutScheduled(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration, msgs []*transport.Message) (uint64, []uint64, error) {
	q, err := s.queue(ctx)
	if err != nil {
		return 0, nil, err
	}
	r, err := q.CommitState(ctx, transport.StateCommit{Key: key, Value: value, Rev: rev, TTL: ttl, Schedule: msgs})
	return r.Rev, r.Seqs, mapErr(key, err)
}

// SchedulesWith reports whether m is best scheduled in a PutScheduled of
// key: on a partitioned queue, if they share a partition; never on a
// JetStream queue of one replica with file storage, where each atomic
// batch is staged in a synced file (transport.Queue.StateCommitsStaged):
// there the dispatcher writes the record, then schedules, as with any
// store.
func (s *Store) SchedulesWith(key string, m *transport.Message) bool {
	s.mu.Lock()
	q := s.q
	s.mu.Unlock()
	return q != nil && !q.StateCommitsStaged() && q.StatePartitionHolds(key, m)
}

// Delete removes the record if its revision is rev.
func (s *Store) Delete(ctx context.Context, key string, rev uint64) error {
	q, err := s.queue(ctx)
	if err != nil {
		return err
	}
	return mapErr(key, q.DeleteState(ctx, key, rev))
}

// ListKeys yields the keys that start with prefix, in no particular order.
func (s *Store) ListKeys(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		q, err := s.queue(ctx)
		if err != nil {
			yield("", err)
			return
		}
		for k, err := range q.StateKeys(ctx, prefix) {
			if !yield(k, err) || err != nil {
				return
			}
		}
	}
}

// mapErr maps the transport's state errors to the saga's.
func mapErr(key string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, transport.ErrStateNotFound):
		return fmt.Errorf("%w: %s: %w", saga.ErrNotFound, key, err)
	case errors.Is(err, transport.ErrStateConflict):
		return fmt.Errorf("%w: %s: %w", saga.ErrConflict, key, err)
	case errors.Is(err, transport.ErrMessageTooLarge), errors.Is(err, transport.ErrInvalidStateKey):
		// Retrying cannot make the record fit, or the key valid.
		return saga.Permanent(fmt.Errorf("queuestore: %s: %w", key, err))
	}
	return fmt.Errorf("queuestore: %s: %w", key, err)
}
