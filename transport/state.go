package transport

import (
	"context"
	"fmt"
	"iter"
	"time"
)

// Queue state: small records (a key, a value, a revision) kept beside a
// queue's scheduled messages, so that a record and messages scheduled on
// the queue are stored in one atomic write (CommitState). The saga
// runtime keeps instance records there (saga/queuestore) to commit a step
// and its timeouts in one write on replicated queues.

// MaxStateKey is the longest state key, in bytes.
const MaxStateKey = 256

// MaxStateSchedules is the most messages one CommitState schedules: the
// write is one atomic batch, which nats-server caps (1,000 messages by
// default, and a server may be configured lower).
const MaxStateSchedules = 64

// StateCommit is one atomic write of a queue's state: a record and the
// messages scheduled with it.
type StateCommit struct {
	// Key names the record: tokens of [A-Za-z0-9_=-] separated by single
	// dots, at most MaxStateKey bytes. Required.
	Key string
	// Value is the record's new value.
	Value []byte
	// Rev is the revision the record must have: 0 if it must not exist.
	Rev uint64
	// TTL, if above 0, lets the record expire TTL after this write (in
	// whole seconds, rounded up, at least 1 s). Default: 0, kept for good.
	TTL time.Duration
	// Schedule are messages scheduled in the same write, each for its
	// ScheduledAt (required), as Schedule would; at most
	// MaxStateSchedules, and each must go to the record's partition
	// (StatePartitionHolds). Default: none.
	Schedule []*Message
}

// StateResult is what CommitState stored.
type StateResult struct {
	// Rev is the record's new revision. Revisions increase and are never
	// reused for a key, also after it was deleted or expired.
	Rev uint64
	// Seqs are the scheduled sequence numbers of StateCommit.Schedule, in
	// order, as Schedule returns them.
	Seqs []uint64
}

// LoadState returns the value and revision of the record stored under
// key, or ErrStateNotFound. On a replicated queue it reads from the
// stream leader, so it sees every commit that returned before it.
func (q *Queue) LoadState(ctx context.Context, key string) ([]byte, uint64, error) {
	if err := validStateKey(key); err != nil {
		return nil, 0, err
	}
	return q.d.loadState(ctx, key, q.statePartition(key))
}

// CommitState stores c.Value under c.Key if the record's revision is
// c.Rev, and schedules c.Schedule, all in one atomic write: either all
// of it is stored or none. It returns ErrStateConflict if the revision
// differs, ErrDuplicateMessage if a message to schedule has a MessageID
// the queue remembers, ErrInvalidStateKey or ErrInvalidMessage for bad
// arguments, and ErrUnsupported on a dead-letter queue. After any other
// error (ErrClosed, the context's error, a server error) the outcome is
// unknown: LoadState tells whether the record was stored.
//
// On JetStream a commit with messages to schedule is an atomic batch
// (nats-server 2.12 or later). On a replicated queue that costs about
// what one replicated write costs; on a queue of one replica with file
// storage nats-server stages each batch in a synced file of its own,
// which makes it many times slower than separate writes (BENCHMARKS.md,
// "r1batch").
func (q *Queue) CommitState(ctx context.Context, c StateCommit) (StateResult, error) {
	if err := validStateKey(c.Key); err != nil {
		return StateResult{}, err
	}
	if len(c.Schedule) > MaxStateSchedules {
		return StateResult{}, invalid("Schedule", "%d messages, at most %d", len(c.Schedule), MaxStateSchedules)
	}
	p := q.statePartition(c.Key)
	ids := make(map[string]bool, len(c.Schedule))
	for i, m := range c.Schedule {
		if err := validateMessage(m, q.cfg.RequiresSession); err != nil {
			return StateResult{}, err
		}
		if m.ScheduledAt.IsZero() {
			return StateResult{}, invalid("ScheduledAt", "message %d: zero time", i)
		}
		if m.MessageID != "" && ids[m.MessageID] {
			return StateResult{}, invalid("Schedule", "message %d: MessageID %.64q twice", i, m.MessageID)
		}
		ids[m.MessageID] = true
		if !q.StatePartitionHolds(c.Key, m) {
			return StateResult{}, invalid("Schedule", "message %d goes to another partition than the record", i)
		}
	}
	if c.TTL > 0 {
		c.TTL = max((c.TTL + time.Second - 1).Truncate(time.Second), time.Second)
	}
	return q.d.commitState(ctx, c, p)
}

// DeleteState removes the record under key if its revision is rev;
// otherwise ErrStateConflict. A missing record is ErrStateNotFound. A
// delete asked again after its answer was lost, which finds the record
// gone, returns nil.
func (q *Queue) DeleteState(ctx context.Context, key string, rev uint64) error {
	if err := validStateKey(key); err != nil {
		return err
	}
	if rev == 0 {
		return fmt.Errorf("%w: %s: delete needs the record's revision", ErrStateConflict, key)
	}
	return q.d.deleteState(ctx, key, rev, q.statePartition(key))
}

// StateKeys yields the keys of the queue's records that start with
// prefix (all if empty), in no particular order.
func (q *Queue) StateKeys(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return q.d.stateKeys(ctx, prefix)
}

// StateCommitsStaged reports whether a CommitState with messages to
// schedule is staged by the server in a synced file of its own: on a
// JetStream queue of one replica with file storage, where nats-server
// (2.15) does that for every atomic batch, which then costs many times
// two separate writes. Callers that can write the record and schedule
// separately (saga/queuestore) do so there.
func (q *Queue) StateCommitsStaged() bool { return q.b.d.stagesStateCommits(q.cfg) }

// StatePartitionHolds reports whether m, scheduled, goes to the partition
// that holds the record under key, as a message scheduled in the same
// CommitState must: always on a queue of one partition; on a partitioned
// queue, when m's SessionID (or else PartitionKey, or else MessageID)
// hashes to the same partition as key, or m has none of them.
func (q *Queue) StatePartitionHolds(key string, m *Message) bool {
	if q.cfg.Partitions == 1 || m.SessionID == "" && m.PartitionKey == "" && m.MessageID == "" {
		return true
	}
	return q.partitionOf(m) == q.statePartition(key)
}

func (q *Queue) statePartition(key string) int {
	if q.cfg.Partitions == 1 {
		return 0
	}
	return hashMod(key, q.cfg.Partitions)
}

func validStateKey(key string) error {
	if key == "" || len(key) > MaxStateKey {
		return fmt.Errorf("%w: %d bytes", ErrInvalidStateKey, len(key))
	}
	tokenStart := true
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c == '.':
			if tokenStart {
				return fmt.Errorf("%w: %.64q: empty token", ErrInvalidStateKey, key)
			}
			tokenStart = true
			continue
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '=', c == '-':
		default:
			return fmt.Errorf("%w: %.64q: byte %q", ErrInvalidStateKey, key, c)
		}
		tokenStart = false
	}
	if tokenStart {
		return fmt.Errorf("%w: %.64q: empty token", ErrInvalidStateKey, key)
	}
	return nil
}
