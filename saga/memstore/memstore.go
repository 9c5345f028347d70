package memstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

// Store is an in-memory saga.ExpiringStore. The zero value is ready to
// use, on the time package's clock.
type Store struct {
	mu   sync.Mutex
	recs map[string]entry
	rev  uint64
	now  func() time.Time
}

var _ saga.ExpiringStore = (*Store)(nil)

type entry struct {
	value   []byte
	rev     uint64
	expires time.Time // zero: never
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock records expire on (see PutTTL). Default:
// time.Now, which a testing/synctest bubble makes virtual.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{}
	for _, o := range opts {
		o(s)
	}
	return s
}

// get returns the live entry under key, forgetting it if it expired.
// s.mu is held.
func (s *Store) get(key string) (entry, bool) {
	e, ok := s.recs[key]
	if ok && !e.expires.IsZero() && !s.clock().Before(e.expires) {
		delete(s.recs, key)
		return entry{}, false
	}
	return e, ok
}

func (s *Store) clock() time.Time {
	if s.now == nil {
		return time.Now()
	}
	return s.now()
}

// Load returns the record under key.
func (s *Store) Load(_ context.Context, key string) ([]byte, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.get(key)
	if !ok {
		return nil, 0, fmt.Errorf("%w: %s", saga.ErrNotFound, key)
	}
	return slices.Clone(e.value), e.rev, nil
}

// Put stores value under key if its revision is rev (0: absent).
func (s *Store) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	return s.put(key, value, rev, time.Time{})
}

// PutTTL is Put, and the record expires ttl after this write, by the
// Store's clock.
func (s *Store) PutTTL(_ context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error) {
	return s.put(key, value, rev, s.clock().Add(ttl))
}

func (s *Store) put(key string, value []byte, rev uint64, expires time.Time) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recs == nil {
		s.recs = make(map[string]entry)
	}
	if e, _ := s.get(key); e.rev != rev {
		return 0, fmt.Errorf("%w: %s at revision %d, expected %d", saga.ErrConflict, key, e.rev, rev)
	}
	s.rev++
	s.recs[key] = entry{value: slices.Clone(value), rev: s.rev, expires: expires}
	return s.rev, nil
}

// Delete removes key if its revision is rev.
func (s *Store) Delete(_ context.Context, key string, rev uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.get(key)
	switch {
	case !ok:
		return fmt.Errorf("%w: %s", saga.ErrNotFound, key)
	case e.rev != rev:
		return fmt.Errorf("%w: %s at revision %d, expected %d", saga.ErrConflict, key, e.rev, rev)
	}
	delete(s.recs, key)
	return nil
}

// Keys returns the keys stored and not expired, sorted.
func (s *Store) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.recs))
	for k := range s.recs {
		if _, ok := s.get(k); ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
