package transport_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// A commit whose answer was lost (it took effect; the try waited out its
// limit) is asked again and reports what it stored: the record's
// revision and the schedules' numbers, each stored once; a commit made
// on that revision then succeeds.
func TestCommitStateAfterLostAnswer(t *testing.T) {
	_, _, b := startServer(t, embedded.Options{})
	ctx := t.Context()
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "lost-state", DuplicateWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var lose atomic.Bool
	t.Cleanup(transport.SetAnswerLost(func() bool { return lose.CompareAndSwap(true, false) }))
	at := time.Now().Add(time.Hour)
	for i, c := range []transport.StateCommit{
		{Key: "k", Value: []byte("v1")},
		{Key: "k", Value: []byte("v2"), Schedule: []*transport.Message{
			{Body: []byte("a"), MessageID: "a", ScheduledAt: at}, {Body: []byte("b"), MessageID: "b", ScheduledAt: at}}},
	} {
		if i > 0 {
			_, c.Rev, err = q.LoadState(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
		}
		lose.Store(true)
		r, err := q.CommitState(ctx, c)
		if lose.Load() {
			t.Fatalf("commit %d: no answer was lost", i)
		}
		if err != nil {
			t.Fatalf("commit %d, its first answer lost: %v", i, err)
		}
		v, rev, err := q.LoadState(ctx, "k")
		if err != nil || string(v) != string(c.Value) || rev != r.Rev {
			t.Errorf("commit %d: LoadState = %q rev %d, %v; want %q rev %d", i, v, rev, err, c.Value, r.Rev)
		}
		ms, err := q.Peek(ctx, transport.ScheduledBit, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != len(r.Seqs) {
			t.Fatalf("commit %d: %d scheduled messages, want %d: stored once", i, len(ms), len(r.Seqs))
		}
		for j, m := range ms {
			if m.Seq != r.Seqs[j] {
				t.Errorf("commit %d: scheduled message %d has seq %#x, CommitState reported %#x", i, j, m.Seq, r.Seqs[j])
			}
		}
	}
}

// A delete whose answer was lost (it took effect; the try waited out its
// limit) is asked again, finds the sequence gone, and returns nil rather
// than the server's "sequence not found".
func TestDeleteStateAfterLostAnswer(t *testing.T) {
	_, _, b := startServer(t, embedded.Options{})
	ctx := t.Context()
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "lost-delete"})
	if err != nil {
		t.Fatal(err)
	}
	var lose atomic.Bool
	t.Cleanup(transport.SetAnswerLost(func() bool { return lose.CompareAndSwap(true, false) }))
	r, err := q.CommitState(ctx, transport.StateCommit{Key: "k", Value: []byte("v1")})
	if err != nil {
		t.Fatal(err)
	}
	lose.Store(true)
	if err := q.DeleteState(ctx, "k", r.Rev); err != nil {
		t.Fatalf("DeleteState, its first answer lost: %v", err)
	}
	if lose.Load() {
		t.Fatal("no answer was lost")
	}
	if _, _, err := q.LoadState(ctx, "k"); !errors.Is(err, transport.ErrStateNotFound) {
		t.Errorf("LoadState after the delete: %v, want ErrStateNotFound", err)
	}
}

// A commit stored by a try that then failed with an error other than its
// time running out (a timeout answered by the client library, say) is
// asked again, refused because its own write holds the record, and
// reports that write's revision rather than a conflict.
func TestCommitStateStoredByAFailedTry(t *testing.T) {
	_, _, b := startServer(t, embedded.Options{})
	ctx := t.Context()
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "failed-try"})
	if err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	t.Cleanup(transport.SetAnswerErr(func() error {
		if fail.CompareAndSwap(true, false) {
			return nats.ErrTimeout
		}
		return nil
	}))
	for i, rev := range []uint64{0, 1} {
		if i > 0 {
			_, rev, err = q.LoadState(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
		}
		fail.Store(true)
		r, err := q.CommitState(ctx, transport.StateCommit{Key: "k", Value: fmt.Appendf(nil, "v%d", i), Rev: rev})
		if fail.Load() {
			t.Fatalf("commit %d: no try failed", i)
		}
		if err != nil {
			t.Fatalf("commit %d (rev %d), stored by a try that failed: %v", i, rev, err)
		}
		if v, got, err := q.LoadState(ctx, "k"); err != nil || got != r.Rev || string(v) != fmt.Sprintf("v%d", i) {
			t.Errorf("commit %d: LoadState = %q rev %d, %v; want v%d rev %d", i, v, got, err, i, r.Rev)
		}
	}
}
