package transporttest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// testState checks queue state: records with revisions that are never
// reused, committed together with scheduled messages all or nothing.
func (s *suite) testState(t *testing.T) {
	parallel(t, "Revisions", s.testStateRevisions)
	parallel(t, "WithSchedules", s.testStateWithSchedules)
	parallel(t, "NothingOnRefusal", s.testStateNothingOnRefusal)
	parallel(t, "Partitioned", s.testStatePartitioned)
	parallel(t, "NoLostUpdate", s.testStateNoLostUpdate)
	parallel(t, "Expires", s.testStateExpires)
	parallel(t, "Input", s.testStateInput)
}

func commitState(t *testing.T, q *transport.Queue, c transport.StateCommit) transport.StateResult {
	t.Helper()
	r, err := q.CommitState(t.Context(), keyedCommit(q, c))
	if err != nil {
		t.Fatalf("CommitState(%s, rev %d, %d schedules): %v", c.Key, c.Rev, len(c.Schedule), err)
	}
	return r
}

func loadState(t *testing.T, q *transport.Queue, key string) ([]byte, uint64) {
	t.Helper()
	v, rev, err := q.LoadState(t.Context(), key)
	if err != nil {
		t.Fatalf("LoadState(%s): %v", key, err)
	}
	return v, rev
}

func expectStateErr(t *testing.T, op string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: error %v, want %v", op, err, want)
	}
}

func (s *suite) testStateRevisions(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	ctx := t.Context()
	const key = "order.a1"
	_, _, err := q.LoadState(ctx, key)
	expectStateErr(t, "LoadState of a key never written", err, transport.ErrStateNotFound)

	r1 := commitState(t, q, transport.StateCommit{Key: key, Value: []byte("v1")})
	if v, rev := loadState(t, q, key); string(v) != "v1" || rev != r1.Rev {
		t.Errorf("LoadState = %q rev %d, want v1 rev %d", v, rev, r1.Rev)
	}
	_, err = q.CommitState(ctx, transport.StateCommit{Key: key, Value: []byte("again")})
	expectStateErr(t, "CommitState with rev 0 of an existing record", err, transport.ErrStateConflict)
	r2 := commitState(t, q, transport.StateCommit{Key: key, Value: []byte("v2"), Rev: r1.Rev})
	if r2.Rev <= r1.Rev {
		t.Errorf("revision after update %d, want above %d", r2.Rev, r1.Rev)
	}
	_, err = q.CommitState(ctx, transport.StateCommit{Key: key, Value: []byte("stale"), Rev: r1.Rev})
	expectStateErr(t, "CommitState on a stale revision", err, transport.ErrStateConflict)
	expectStateErr(t, "DeleteState on a stale revision", q.DeleteState(ctx, key, r1.Rev), transport.ErrStateConflict)
	if v, _ := loadState(t, q, key); string(v) != "v2" {
		t.Errorf("after refused writes LoadState = %q, want v2", v)
	}

	other := commitState(t, q, transport.StateCommit{Key: "order.b2", Value: []byte("b")})
	var keys []string
	for k, err := range q.StateKeys(ctx, "order.") {
		if err != nil {
			t.Fatalf("StateKeys: %v", err)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"order.a1", "order.b2"}) {
		t.Errorf("StateKeys(order.) = %q, want order.a1 and order.b2", keys)
	}

	if err := q.DeleteState(ctx, key, r2.Rev); err != nil {
		t.Fatalf("DeleteState(rev %d): %v", r2.Rev, err)
	}
	_, _, err = q.LoadState(ctx, key)
	expectStateErr(t, "LoadState after DeleteState", err, transport.ErrStateNotFound)
	expectStateErr(t, "DeleteState of a deleted record", q.DeleteState(ctx, key, r2.Rev), transport.ErrStateNotFound)
	r3 := commitState(t, q, transport.StateCommit{Key: key, Value: []byte("v3")})
	if r3.Rev <= max(r2.Rev, other.Rev) {
		t.Errorf("revision of a record created again %d, want above every earlier one (%d): revisions are never reused", r3.Rev, max(r2.Rev, other.Rev))
	}
}

// testStateWithSchedules: the messages of a commit are scheduled as
// Schedule would, with the numbers CommitState reports: they activate on
// time, and Cancel takes them.
func (s *suite) testStateWithSchedules(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{DuplicateWindow: time.Minute})
	soon := time.Now().Add(time.Second)
	later := time.Now().Add(time.Hour)
	near := &transport.Message{Body: []byte("near"), MessageID: "t-near", ScheduledAt: soon}
	far := &transport.Message{Body: []byte("far"), MessageID: "t-far", ScheduledAt: later}
	r := commitState(t, q, transport.StateCommit{Key: stateKey(q, "saga.x"), Value: []byte("s"), Schedule: []*transport.Message{near, far}})
	if len(r.Seqs) != 2 || !transport.IsScheduledSeq(r.Seqs[0]) || !transport.IsScheduledSeq(r.Seqs[1]) {
		t.Fatalf("CommitState with 2 schedules: Seqs %#x, want 2 scheduled sequence numbers", r.Seqs)
	}
	browsed := map[uint64]string{}
	for _, m := range peekAll(t, q) {
		if m.State == transport.Scheduled {
			browsed[m.Seq] = string(m.Body)
		}
	}
	if browsed[r.Seqs[0]] != "near" || browsed[r.Seqs[1]] != "far" {
		t.Errorf("scheduled messages browsed %v, want near at %#x and far at %#x", browsed, r.Seqs[0], r.Seqs[1])
	}
	if err := q.Cancel(t.Context(), r.Seqs[1]); err != nil {
		t.Errorf("Cancel(the far schedule, %#x): %v, want nil", r.Seqs[1], err)
	}
	got := receiveOne(t, q, 2*time.Second+s.f.ActivationSlack+awaitMargin)
	if string(got.Body) != "near" || got.At.Before(soon) {
		t.Errorf("received %q at %v, want near, not before %v", got.Body, got.At, soon)
	}
	complete(t, got.Delivery)
	// The MessageIDs are remembered as for Schedule.
	res, err := q.Send(t.Context(), keyed(q, &transport.Message{Body: []byte("again"), MessageID: "t-near"}))
	if err != nil || !res.Duplicate {
		t.Errorf("Send with the MessageID of a committed schedule = %+v, %v: want Duplicate", res, err)
	}
}

// testStateNothingOnRefusal: a commit refused for its revision or for a
// duplicate MessageID stores nothing, neither the record nor any
// schedule.
func (s *suite) testStateNothingOnRefusal(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{DuplicateWindow: time.Minute})
	ctx := t.Context()
	at := time.Now().Add(time.Hour)
	k, fresh := stateKey(q, "k"), stateKey(q, "fresh")
	schedule(t, q, &transport.Message{Body: []byte("taken"), MessageID: "taken"}, at)
	r := commitState(t, q, transport.StateCommit{Key: k, Value: []byte("v1")})

	_, err := q.CommitState(ctx, keyedCommit(q, transport.StateCommit{Key: k, Value: []byte("stale"),
		Schedule: []*transport.Message{{Body: []byte("lost1"), MessageID: "new-1", ScheduledAt: at}}}))
	expectStateErr(t, "CommitState on a wrong revision with a schedule", err, transport.ErrStateConflict)
	_, err = q.CommitState(ctx, keyedCommit(q, transport.StateCommit{Key: k, Value: []byte("dup"), Rev: r.Rev,
		Schedule: []*transport.Message{
			{Body: []byte("lost2"), MessageID: "new-2", ScheduledAt: at},
			{Body: []byte("dup"), MessageID: "taken", ScheduledAt: at},
		}}))
	expectStateErr(t, "CommitState with a schedule whose MessageID is taken", err, transport.ErrDuplicateMessage)
	_, err = q.CommitState(ctx, keyedCommit(q, transport.StateCommit{Key: fresh, Value: []byte("dup"),
		Schedule: []*transport.Message{{Body: []byte("dup"), MessageID: "taken", ScheduledAt: at}}}))
	expectStateErr(t, "CommitState creating a record with a schedule whose MessageID is taken", err, transport.ErrDuplicateMessage)

	if v, rev := loadState(t, q, k); string(v) != "v1" || rev != r.Rev {
		t.Errorf("after refused commits LoadState = %q rev %d, want v1 rev %d", v, rev, r.Rev)
	}
	if _, _, err := q.LoadState(ctx, fresh); !errors.Is(err, transport.ErrStateNotFound) {
		t.Errorf("LoadState of the record a refused commit would have created: %v, want ErrStateNotFound", err)
	}
	var bodies []string
	for _, m := range peekAll(t, q) {
		bodies = append(bodies, string(m.Body))
	}
	if !slices.Equal(bodies, []string{"taken"}) {
		t.Errorf("messages after refused commits %q, want only the one scheduled before", bodies)
	}
	// new-1 and new-2 were never stored: they can be scheduled now.
	r2 := commitState(t, q, transport.StateCommit{Key: k, Value: []byte("v2"), Rev: r.Rev,
		Schedule: []*transport.Message{
			{Body: []byte("one"), MessageID: "new-1", ScheduledAt: at},
			{Body: []byte("two"), MessageID: "new-2", ScheduledAt: at},
		}})
	if len(r2.Seqs) != 2 {
		t.Errorf("Seqs %#x, want 2", r2.Seqs)
	}
}

// testStatePartitioned: on a partitioned queue a record and the messages
// scheduled with it share a partition; a message that goes elsewhere is
// refused.
func (s *suite) testStatePartitioned(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{Partitions: partitions})
	at := time.Now().Add(time.Hour)
	var elsewhere *transport.Message // a message of another partition than elsewhereKey
	var elsewhereKey string
	held := 0
	for i := range 64 {
		key := fmt.Sprintf("saga.k%d", i)
		// An ID unrelated to the key: FNV-1a's low bits of two strings
		// that end alike are correlated ("m-"+key never shares key's
		// partition on 4).
		id := sha256.Sum256([]byte(key))
		m := &transport.Message{Body: []byte(key), MessageID: hex.EncodeToString(id[:8]), ScheduledAt: at}
		if !q.StatePartitionHolds(key, m) {
			elsewhere, elsewhereKey = m, key
			continue
		}
		held++
		r := commitState(t, q, transport.StateCommit{Key: key, Value: []byte(key), Schedule: []*transport.Message{m}})
		if v, rev := loadState(t, q, key); string(v) != key || rev != r.Rev {
			t.Errorf("LoadState(%s) = %q rev %d, want %s rev %d", key, v, rev, key, r.Rev)
		}
		// The schedule is where its MessageID's duplicates are detected:
		// the partition FNV-1a 64 of the MessageID picks (docs/wire.md).
		if want := partitionOf(partitions, m); len(r.Seqs) != 1 || transport.Partition(r.Seqs[0]) != want {
			t.Errorf("CommitState(%s) scheduled %#x, want one message in partition %d", key, r.Seqs, want)
		}
	}
	if elsewhere == nil || held == 0 {
		t.Fatalf("of 64 messages %d hashed to their key's partition on %d partitions: want some that do and some that do not", held, partitions)
	}
	_, err := q.CommitState(t.Context(), transport.StateCommit{Key: elsewhereKey, Value: []byte("x"), Schedule: []*transport.Message{elsewhere}})
	expectStateErr(t, "CommitState with a message of another partition", err, transport.ErrInvalidMessage)

	// A PartitionKey picks the partition of a message without a MessageID
	// too: one of another partition than the record is refused, not
	// scheduled in the record's; one of the record's partition is
	// scheduled there.
	const key = "saga.keyed"
	p := partitionOf(partitions, &transport.Message{PartitionKey: key})
	other := &transport.Message{Body: []byte("other"), PartitionKey: keyIn((p+1)%partitions, partitions, "tenant"), ScheduledAt: at}
	if q.StatePartitionHolds(key, other) {
		t.Errorf("StatePartitionHolds(%s, a message with PartitionKey %q of partition %d) = true, want false: the record is in partition %d",
			key, other.PartitionKey, (p+1)%partitions, p)
	}
	_, err = q.CommitState(t.Context(), transport.StateCommit{Key: key, Value: []byte("x"), Schedule: []*transport.Message{other}})
	expectStateErr(t, "CommitState with a message whose PartitionKey picks another partition", err, transport.ErrInvalidMessage)
	same := &transport.Message{Body: []byte("same"), PartitionKey: keyIn(p, partitions, "tenant"), ScheduledAt: at}
	r := commitState(t, q, transport.StateCommit{Key: key, Value: []byte("x"), Schedule: []*transport.Message{same}})
	if len(r.Seqs) != 1 || transport.Partition(r.Seqs[0]) != p {
		t.Errorf("CommitState(%s) with a message whose PartitionKey picks its partition %d scheduled %#x", key, p, r.Seqs)
	}
}

// testStateNoLostUpdate: writers racing on one record, each retrying on
// ErrStateConflict, lose no update.
func (s *suite) testStateNoLostUpdate(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	const writers, each = 4, 15
	commitState(t, q, transport.StateCommit{Key: "counter", Value: []byte("0")})
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			for range each {
				for {
					v, rev, err := q.LoadState(t.Context(), "counter")
					if err != nil {
						errs <- err
						return
					}
					var n int
					fmt.Sscan(string(v), &n)
					_, err = q.CommitState(t.Context(), transport.StateCommit{Key: "counter", Value: fmt.Append(nil, n+1), Rev: rev})
					if errors.Is(err, transport.ErrStateConflict) {
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					break
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a writer failed: %v", err)
	}
	if v, _ := loadState(t, q, "counter"); string(v) != fmt.Sprint(writers*each) {
		t.Errorf("counter %s after %d increments by %d racing writers, want %d", v, writers*each, writers, writers*each)
	}
}

func (s *suite) testStateExpires(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	r := commitState(t, q, transport.StateCommit{Key: "done", Value: []byte("x"), TTL: time.Second})
	kept := commitState(t, q, transport.StateCommit{Key: "kept", Value: []byte("y")})
	eventually(t, 2*time.Second+awaitMargin, func() bool {
		_, _, err := q.LoadState(t.Context(), "done")
		return errors.Is(err, transport.ErrStateNotFound)
	}, "a record committed with TTL 1s was still there")
	if _, rev := loadState(t, q, "kept"); rev != kept.Rev {
		t.Errorf("a record without TTL: rev %d, want %d", rev, kept.Rev)
	}
	again := commitState(t, q, transport.StateCommit{Key: "done", Value: []byte("again")})
	if again.Rev <= kept.Rev || again.Rev <= r.Rev {
		t.Errorf("revision of an expired record created again: %d, want above %d", again.Rev, max(r.Rev, kept.Rev))
	}
}

// testStateInput: hostile keys never become subjects; bad messages are
// refused before anything is stored.
func (s *suite) testStateInput(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{})
	ctx := t.Context()
	for _, key := range []string{"", "a.*", "a.>", ">", "a b", "a..b", ".a", "a.", "a\x00b", "a\nb", "ä", string(make([]byte, transport.MaxStateKey+1))} {
		_, err := q.CommitState(ctx, transport.StateCommit{Key: key, Value: []byte("x")})
		expectStateErr(t, fmt.Sprintf("CommitState(key %q)", key), err, transport.ErrInvalidStateKey)
		_, _, err = q.LoadState(ctx, key)
		expectStateErr(t, fmt.Sprintf("LoadState(key %q)", key), err, transport.ErrInvalidStateKey)
		expectStateErr(t, fmt.Sprintf("DeleteState(key %q)", key), q.DeleteState(ctx, key, 1), transport.ErrInvalidStateKey)
	}
	at := time.Now().Add(time.Hour)
	for name, ms := range map[string][]*transport.Message{
		"no ScheduledAt":   {{Body: []byte("x"), MessageID: "a"}},
		"bad MessageID":    {{Body: []byte("x"), MessageID: "a\x00", ScheduledAt: at}},
		"MessageID twice":  {{MessageID: "same", ScheduledAt: at}, {MessageID: "same", ScheduledAt: at}},
		"too many":         slices.Repeat([]*transport.Message{{ScheduledAt: at}}, transport.MaxStateSchedules+1),
		"a nil message":    {nil},
		"a bad property":   {{Properties: map[string]string{"a b": "x"}, ScheduledAt: at}},
		"an invalid value": {{CorrelationID: "a\x00b", ScheduledAt: at}},
	} {
		_, err := q.CommitState(ctx, transport.StateCommit{Key: "k", Value: []byte("x"), Schedule: ms})
		expectStateErr(t, "CommitState with "+name, err, transport.ErrInvalidMessage)
	}
	if _, _, err := q.LoadState(ctx, "k"); !errors.Is(err, transport.ErrStateNotFound) {
		t.Errorf("LoadState after refused commits: %v, want ErrStateNotFound", err)
	}
	if n := len(peekAll(t, q)); n != 0 {
		t.Errorf("%d messages after refused commits, want none", n)
	}
	_, err := q.DeadLetterQueue().CommitState(ctx, transport.StateCommit{Key: "k"})
	expectStateErr(t, "CommitState on a dead-letter queue", err, transport.ErrUnsupported)
}
