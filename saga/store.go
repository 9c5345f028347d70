package saga

import (
	"context"
)

// Store persists saga records with optimistic concurrency. It is small
// on purpose, so that a SQL store is a table with (key, value, revision):
// Put with rev 0 is an INSERT, with rev > 0 an UPDATE ... WHERE revision
// = rev.
//
// Keys are made by the dispatcher from the saga name and instance ID and
// contain only [A-Za-z0-9_=-] and '.'.
type Store interface {
	// Load returns the record and its revision, or ErrNotFound.
	Load(ctx context.Context, key string) (value []byte, rev uint64, err error)
	// Put stores value if the record's revision is rev (0: if it does not
	// exist) and returns the new revision; otherwise ErrConflict.
	Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error)
	// Delete removes the record if its revision is rev; otherwise
	// ErrConflict. Deleting a missing record returns ErrNotFound.
	Delete(ctx context.Context, key string, rev uint64) error
}
