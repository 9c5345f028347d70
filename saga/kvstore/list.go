package kvstore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/saga"
)

var _ saga.ListingStore = (*Store)(nil)

// ListKeys yields the keys that start with prefix (every key if empty), in
// no particular order: for saga.Dispatcher.StuckInstances and saga.Find.
// A prefix of one key token and a dot ("order.", the keys of a saga type)
// is read with a subject filter, as is a prefix of several whole tokens
// (an index value's entries), which on a bucket of one replica is first
// asked for in one batched direct get; any other prefix reads every key.
func (s *Store) ListKeys(ctx context.Context, prefix string) iter.Seq2[string, error] {
	if s.directGet == "" || !wholeTokens(prefix) || !strings.Contains(strings.TrimSuffix(prefix, "."), ".") {
		return ListKeys(ctx, s.kv, prefix)
	}
	return func(yield func(string, error) bool) {
		keys, err := s.listDirect(ctx, prefix)
		if errors.Is(err, errTooMany) {
			for k, err := range ListKeys(ctx, s.kv, prefix) {
				if !yield(k, err) {
					return
				}
			}
			return
		}
		if err != nil {
			yield("", fmt.Errorf("kvstore: listing keys: %w", err))
			return
		}
		for _, k := range keys {
			if !yield(k, nil) {
				return
			}
		}
	}
}

// ListKeys yields the keys of kv that start with prefix, as Store.ListKeys
// does, for tools that hold a bucket rather than a Store.
func ListKeys(ctx context.Context, kv jetstream.KeyValue, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // ends the lister's goroutine if the caller stops early
		filter := ">"
		if tok, rest, ok := strings.Cut(prefix, "."); ok && rest == "" && tok != "" && !strings.ContainsAny(tok, "*> ") {
			filter = tok + ".*"
		} else if wholeTokens(prefix) {
			// An index's entries of one value (saga.Find): the server
			// sends only those, not every key of the bucket.
			filter = prefix + ">"
		}
		l, err := kv.ListKeysFiltered(ctx, filter)
		if err != nil {
			yield("", fmt.Errorf("kvstore: listing keys: %w", err))
			return
		}
		defer l.Stop()
		for k := range l.Keys() {
			if !strings.HasPrefix(k, prefix) {
				continue
			}
			if !yield(k, nil) {
				return
			}
		}
		if err := ctx.Err(); err != nil {
			yield("", fmt.Errorf("kvstore: listing keys: %w", context.Cause(ctx)))
		}
	}
}

// wholeTokens reports whether prefix is one or more whole subject tokens,
// each ended by a dot, without wildcards or spaces.
func wholeTokens(prefix string) bool {
	if !strings.HasSuffix(prefix, ".") || strings.ContainsAny(prefix, "*> \t") {
		return false
	}
	return !strings.Contains(prefix, "..") && !strings.HasPrefix(prefix, ".")
}
