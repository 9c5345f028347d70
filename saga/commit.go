package saga

import (
	"context"
	"errors"
	"fmt"
	"time"

	recordfmt "github.com/jetsaga/jetsaga/internal/record"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// Loading and committing records: the commit path's view of the Store.

// records is how the commit path loads and commits saga records: the
// Store, with records decoded, and possibly a cache of what this
// dispatcher wrote in front of it (cache.go), which the commit path does
// not know about. What it must know is the one rule that makes a cache
// safe: a load that may be stale may return a record that another writer
// has replaced since. A commit on it fails (the store refuses its
// revision: ErrConflict); any other decision made from it must be made
// again on a load that is not stale.
type records interface {
	// load returns the record stored under key and its revision, or
	// ErrNotFound. With mayBeStale, it may return a record that is no
	// longer the one stored; stale reports whether it could be.
	load(ctx context.Context, key string, mayBeStale bool) (rec *record, rev uint64, stale bool, err error)
	// commit stores rec under key if the stored record's revision is rev,
	// and returns the new revision; otherwise ErrConflict.
	commit(ctx context.Context, key string, rec *record, rev uint64) (uint64, error)
	// keepOutbox is told that rec, committed at rev with an outbox of
	// timeouts only, has had that outbox carried out in memory (rec is
	// without it), and reports whether the stored record may keep the
	// outbox until the next commit — the next step on the instance starts
	// from rec — rather than be cleared by a commit now.
	keepOutbox(key string, rev uint64, rec *record) bool
}

// storeRecords are records in a Store.
type storeRecords struct {
	store     Store
	retention time.Duration // of a completed instance's record
}

func (s storeRecords) load(ctx context.Context, key string, _ bool) (*record, uint64, bool, error) {
	raw, rev, err := s.store.Load(ctx, key)
	if err != nil {
		return nil, 0, false, err
	}
	rec, err := recordfmt.Decode(raw)
	if err != nil {
		return nil, 0, false, Permanent(fmt.Errorf("saga: stored record %s unreadable: %w", key, err))
	}
	return rec, rev, false, nil
}

// commit writes rec; a completed instance's record expires after the
// retention, if the store can let it.
func (s storeRecords) commit(ctx context.Context, key string, rec *record, rev uint64) (uint64, error) {
	b, err := recordfmt.Encode(rec)
	if err != nil {
		return 0, err
	}
	if es, ok := s.store.(ExpiringStore); ok && rec.Completed {
		return es.PutTTL(ctx, key, b, rev, s.retention)
	}
	return s.store.Put(ctx, key, b, rev)
}

// keepOutbox: a step that loads the record carries a kept outbox out
// again, one schedule call per timeout, where clearing it costs one write
// now; without a cache, every step loads.
func (storeRecords) keepOutbox(string, uint64, *record) bool { return false }

// load returns the record stored under key and its revision, or
// ErrNotFound, from the store: for the operations that are not steps
// (Instance, CancelTimeouts, a flush message), which leave the record
// cache as it is.
func (d *Dispatcher) load(ctx context.Context, key string) (*record, uint64, error) {
	rec, rev, _, err := storeRecords{store: d.store}.load(ctx, key, false)
	return rec, rev, err
}

// scheduledRecords are records in a SchedulingStore whose commits take
// the timeouts a step requests on the dispatcher's queue (up to
// transport.MaxStateSchedules of them) into the same write: the record
// with its outbox as it is, and those timeouts' messages, made by the
// engine exactly as its Schedule makes them. Once committed they are
// carried out, so they leave the outbox in memory, with their refs in
// rec.Timeouts; the stored record keeps them in its outbox until the next
// commit, which is what carryOutInMemory does with an outbox of timeouts, and
// safe for the same reason: a step that loads the record schedules them
// again, and the queue's duplicate detection answers with their refs.
type scheduledRecords struct {
	storeRecords
	store  SchedulingStore
	engine *timeout.Queue
	queue  string
}

func (s scheduledRecords) commit(ctx context.Context, key string, rec *record, rev uint64) (uint64, error) {
	var (
		rest   []effect          // the outbox without the timeouts taken in
		taken  []timeout.Timeout // the timeouts taken into the commit
		tokens []string          // and their tokens
		msgs   []*transport.Message
	)
	for _, e := range rec.Outbox {
		if e.Kind == effectSchedule && e.Queue == s.queue && len(msgs) < transport.MaxStateSchedules {
			t := timeoutOf(e)
			if m, err := s.engine.Message(t); err == nil && s.store.SchedulesWith(key, m) {
				taken, tokens, msgs = append(taken, t), append(tokens, e.Token), append(msgs, m)
				continue
			}
		}
		rest = append(rest, e)
	}
	if len(msgs) == 0 {
		return s.storeRecords.commit(ctx, key, rec, rev)
	}
	b, err := recordfmt.Encode(rec)
	if err != nil {
		return 0, err
	}
	var ttl time.Duration
	if rec.Completed {
		ttl = s.retention
	}
	n, seqs, err := s.store.PutScheduled(ctx, key, b, rev, ttl, msgs)
	if errors.Is(err, transport.ErrDuplicateMessage) {
		// Scheduled before (a record written otherwise): the outbox
		// carries them out, and the duplicates answer with their refs.
		return s.storeRecords.commit(ctx, key, rec, rev)
	}
	if err != nil {
		return 0, err
	}
	for j, t := range taken {
		if te, ok := rec.Timeouts[tokens[j]]; ok {
			te.Ref = s.engine.Ref(t, seqs[j])
			rec.Timeouts[tokens[j]] = te
		}
	}
	rec.Outbox = rest
	return n, nil
}
