package memstore

import (
	"context"
	"iter"
	"strings"

	"github.com/jetsaga/jetsaga/saga"
)

var _ saga.ListingStore = (*Store)(nil)

// ListKeys yields the keys stored and not expired that start with prefix
// (all if empty), sorted: for saga.Dispatcher.StuckInstances.
func (s *Store) ListKeys(_ context.Context, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		for _, k := range s.Keys() {
			if strings.HasPrefix(k, prefix) && !yield(k, nil) {
				return
			}
		}
	}
}
