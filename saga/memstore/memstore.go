package memstore

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/jetsaga/jetsaga/saga"
)

// Store is an in-memory saga.Store. The zero value is ready to use.
type Store struct {
	mu   sync.Mutex
	recs map[string]entry
	rev  uint64
}

type entry struct {
	value []byte
	rev   uint64
}

// New returns an empty Store.
func New() *Store { return &Store{} }

// Load returns the record under key.
func (s *Store) Load(_ context.Context, key string) ([]byte, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.recs[key]
	if !ok {
		return nil, 0, fmt.Errorf("%w: %s", saga.ErrNotFound, key)
	}
	return slices.Clone(e.value), e.rev, nil
}

// Put stores value under key if its revision is rev (0: absent).
func (s *Store) Put(_ context.Context, key string, value []byte, rev uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recs == nil {
		s.recs = make(map[string]entry)
	}
	if e := s.recs[key]; e.rev != rev {
		return 0, fmt.Errorf("%w: %s at revision %d, expected %d", saga.ErrConflict, key, e.rev, rev)
	}
	s.rev++
	s.recs[key] = entry{value: slices.Clone(value), rev: s.rev}
	return s.rev, nil
}

// Delete removes key if its revision is rev.
func (s *Store) Delete(_ context.Context, key string, rev uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.recs[key]
	switch {
	case !ok:
		return fmt.Errorf("%w: %s", saga.ErrNotFound, key)
	case e.rev != rev:
		return fmt.Errorf("%w: %s at revision %d, expected %d", saga.ErrConflict, key, e.rev, rev)
	}
	delete(s.recs, key)
	return nil
}

// Keys returns the keys stored, sorted.
func (s *Store) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.recs))
	for k := range s.recs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
