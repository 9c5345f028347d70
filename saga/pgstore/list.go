package pgstore

import (
	"context"
	"fmt"
	"iter"
	"strings"
)

// ListKeys yields the keys of live rows that start with prefix (every key
// if empty), in byte order, for saga.Dispatcher.StuckInstances. It reads
// a page of keys at a time (no transaction stays open while the caller
// works): a key created or removed during the listing may or may not be
// yielded.
func (s *Store) ListKeys(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		q := "SELECT key FROM " + s.names.table + " WHERE key >= $1 AND ($2::text IS NULL OR key > $2) AND starts_with(key, $1)"
		var upper *string
		if u, ok := successor(prefix); ok {
			upper = &u
			q += " AND key < $4"
		} else {
			q += " AND $4::text IS NULL"
		}
		q += " AND " + live + " ORDER BY key LIMIT $3"
		var after *string
		for {
			rows, err := s.pool.Query(ctx, q, prefix, after, s.listPage, upper)
			if err != nil {
				yield("", fmt.Errorf("pgstore: listing keys: %w", err))
				return
			}
			keys := make([]string, 0, s.listPage)
			for rows.Next() {
				var k string
				if err := rows.Scan(&k); err != nil {
					rows.Close()
					yield("", fmt.Errorf("pgstore: listing keys: %w", err))
					return
				}
				keys = append(keys, k)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				yield("", fmt.Errorf("pgstore: listing keys: %w", err))
				return
			}
			for _, k := range keys {
				if !yield(k, nil) {
					return
				}
			}
			if len(keys) < s.listPage {
				return
			}
			after = &keys[len(keys)-1]
		}
	}
}

// successor returns the least string greater than every string that
// starts with prefix, when it is easy to tell: prefix ends in an ASCII
// byte other than DEL (as the dispatcher's keys do).
func successor(prefix string) (string, bool) {
	if prefix == "" {
		return "", false
	}
	last := prefix[len(prefix)-1]
	if last >= 0x7f {
		return "", false
	}
	var b strings.Builder
	b.WriteString(prefix[:len(prefix)-1])
	b.WriteByte(last + 1)
	return b.String(), true
}
