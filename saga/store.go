package saga

import (
	"context"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// Store persists saga records with optimistic concurrency. It is small
// on purpose, so that a SQL store is a table with (key, value, revision):
// Put with rev 0 is an INSERT, with rev > 0 an UPDATE ... WHERE revision
// = rev.
//
// Keys are made by the dispatcher from the saga name and instance ID and
// contain only [A-Za-z0-9_=-] and '.'.
//
// The rule that matters most: a revision is never reused for a key, also
// after the record was deleted or expired. A Put that creates a record
// again returns a revision greater than any the key had before (in SQL, a
// revision drawn from one sequence for the whole table, not a per-row
// counter starting at 1). The dispatcher's record cache ([WithRecordCache])
// takes "same revision" to mean "same record": a store that reuses
// revisions would have it commit on a record that is not the one stored,
// and lose updates.
//
// Package storetest is the conformance suite: run it on a store of your
// own before you use it (kvstore and memstore pass it).
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

// ExpiringStore is a Store that can let a record expire. The dispatcher
// writes the tombstones of completed instances with PutTTL, so that they
// are kept for the retention (WithCompletedRetention) and no longer; with
// a Store that is not an ExpiringStore they are kept for good.
//
// In SQL it is an expires_at column: PutTTL sets it to now + ttl, Put
// clears it, and Load (and the revision check of Put and Delete) treats a
// row past it as absent; a periodic DELETE ... WHERE expires_at < now
// reclaims the space.
type ExpiringStore interface {
	Store
	// PutTTL is Put, and the record expires ttl after this write: Load
	// then returns ErrNotFound and Put with rev 0 creates it again. A
	// later Put (or PutTTL) replaces the expiry.
	PutTTL(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration) (uint64, error)
}

// SchedulingStore is an ExpiringStore that keeps records beside a
// transport queue's scheduled messages, and can store a record together
// with messages scheduled on that queue in one atomic write
// (saga/queuestore, on transport.Queue's state). A dispatcher whose store
// is one, and whose timeout scheduler is a timeout.Queue, commits a
// step's state and the timeouts it requests on the dispatcher's queue in
// that one write, rather than a write of the state and then one schedule
// per timeout.
type SchedulingStore interface {
	ExpiringStore
	// Queue returns the broker and the name of the queue whose scheduled
	// messages PutScheduled writes.
	Queue() (*transport.Broker, string)
	// SchedulesWith reports whether PutScheduled of key can schedule m.
	SchedulesWith(key string, m *transport.Message) bool
	// PutScheduled is PutTTL (Put if ttl is 0) that also schedules msgs
	// (each with ScheduledAt set) on Queue, all or nothing, and returns
	// the record's new revision and each message's scheduled sequence
	// number (as transport.Queue.Schedule returns it). A message whose
	// MessageID the queue remembers fails it with
	// transport.ErrDuplicateMessage, and nothing is stored.
	PutScheduled(ctx context.Context, key string, value []byte, rev uint64, ttl time.Duration, msgs []*transport.Message) (uint64, []uint64, error)
}

// UnitStore is a Store that can run a step in a unit of work: a
// transaction of the database the records are in, which the step's
// handler can write its own rows in (PostgreSQL's, for saga/pgstore).
// It is optional: a dispatcher whose store is one runs every step's
// attempt as
//
//	load the record in the unit
//	run the handler with the unit's context
//	commit the record (with its inbox and outbox) in the unit
//	commit the unit
//	carry out the effects the record's outbox holds
//
// and rolls the unit back on any other way out of the attempt: a handler
// error or panic, a conflict (the attempt runs again in a new unit), a
// failed commit. So the handler's own writes, the record, its inbox and
// its outbox commit together or not at all, and a redelivered message
// finds its effect recorded (its inbox entry) with the writes it made.
// Messages and timeouts are carried out after the unit commits, as on any
// store.
//
// The rules that matter most: Load, Put, PutTTL and Delete called with
// the unit's context (or one derived from it) run in the unit while it is
// open, and outside it, as with the context Begin was given, once Commit
// or Rollback ended it; a Put in the unit is refused (ErrConflict), by
// the Put or by the unit's Commit, if the record's revision changed since
// the unit loaded it, as outside — or the unit's Load locks the record
// until the unit ends, so that it cannot change. Revisions drawn in a unit that rolls back are never issued
// again (the Store rule).
//
// A step in a unit always loads the record in the unit: the record cache
// (WithRecordCache) is not used. Changes to a record outside steps
// (CancelTimeouts, ReplanInstance, migrations, flush messages) use Load
// and Put outside any unit.
type UnitStore interface {
	Store
	// Begin opens a unit of work and returns the context that carries it
	// (derived from ctx, for the store's Load and Put and for the
	// handler's accessor) and the unit, to be ended by Commit or
	// Rollback.
	Begin(ctx context.Context) (context.Context, Unit, error)
}

// Unit is a unit of work a UnitStore opened. The dispatcher ends each
// unit it opens exactly once, by Commit or Rollback.
type Unit interface {
	// Commit makes the unit's writes durable, all of them, or returns an
	// error: then the writes may or may not be committed (a connection
	// lost during a commit), and the step runs again, finding its own
	// inbox entry if they were.
	Commit(ctx context.Context) error
	// Rollback discards the unit's writes.
	Rollback(ctx context.Context) error
}
