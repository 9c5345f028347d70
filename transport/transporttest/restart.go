package transporttest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// testRestart checks R2: scheduled and active messages survive a restart
// of the backend's server, graceful or abrupt; every message arrives
// exactly once, none early, and overdue ones fire after the restart.
// These subtests do not run in parallel: the server is shared.
func (s *suite) testRestart(t *testing.T) {
	if s.f.Restart == nil {
		t.Skip("transporttest: Features.Restart is nil: the backend has no server to restart")
	}
	t.Run("Graceful", func(t *testing.T) { s.testRestartWith(t, false) })
	t.Run("Abrupt", func(t *testing.T) { s.testRestartWith(t, true) })
	t.Run("DuplicatesGraceful", func(t *testing.T) { s.testRestartDuplicates(t, false) })
	t.Run("DuplicatesAbrupt", func(t *testing.T) { s.testRestartDuplicates(t, true) })
	t.Run("Topic", s.testRestartTopic)
	t.Run("StateAbrupt", s.testRestartState)
}

// testRestartState checks that queue state survives an abrupt restart:
// records keep their values and revisions, a commit on the revision read
// before the restart succeeds after it, one on an older revision is
// refused, and the messages a commit scheduled are delivered once.
func (s *suite) testRestartState(t *testing.T) {
	_, q := s.open(t, transport.QueueConfig{DuplicateWindow: time.Hour})
	due := time.Now().Add(2 * time.Second)
	key := stateKey(q, "a")
	r1 := commitState(t, q, transport.StateCommit{Key: key, Value: []byte("v1")})
	r2 := commitState(t, q, transport.StateCommit{Key: key, Value: []byte("v2"), Rev: r1.Rev,
		Schedule: []*transport.Message{{Body: []byte("due"), MessageID: "due", ScheduledAt: due}}})
	s.f.Restart(t, true, 0)
	eventually(t, 2*awaitMargin, func() bool {
		_, _, err := q.LoadState(t.Context(), key)
		return err == nil
	}, "the queue's state to answer after the restart")
	if v, rev := loadState(t, q, key); string(v) != "v2" || rev != r2.Rev {
		t.Errorf("after the restart LoadState = %q rev %d, want v2 rev %d", v, rev, r2.Rev)
	}
	_, err := q.CommitState(t.Context(), transport.StateCommit{Key: key, Value: []byte("stale"), Rev: r1.Rev})
	expectStateErr(t, "CommitState on the revision before last, after the restart", err, transport.ErrStateConflict)
	r3 := commitState(t, q, transport.StateCommit{Key: key, Value: []byte("v3"), Rev: r2.Rev})
	if r3.Rev <= r2.Rev {
		t.Errorf("revision after the restart %d, want above %d", r3.Rev, r2.Rev)
	}
	got := receiveN(t, q, 1, time.Until(due)+s.f.ActivationSlack+awaitMargin)
	if string(got[0].Body) != "due" || got[0].At.Before(due) {
		t.Errorf("received %q at %v, want the committed schedule, not before %v", got[0].Body, got[0].At, due)
	}
	expectNone(t, q, quietMargin)
}

// testRestartDuplicates checks that MessageIDs are remembered across a
// restart of the server, whatever became of their messages: nats-server
// rebuilds its own duplicate table only from messages still stored.
func (s *suite) testRestartDuplicates(t *testing.T, abrupt bool) {
	_, q := s.open(t, transport.QueueConfig{DuplicateWindow: time.Hour})
	ids := seedFates(t, q, s.f.CancelMargin)
	s.f.Restart(t, abrupt, 0)
	// Sends may fail while the client reconnects.
	eventually(t, 2*awaitMargin, func() bool {
		_, err := q.Peek(t.Context(), 0, 1)
		return err == nil
	}, "the queue to answer after the restart")
	checkAllDuplicates(t, q, ids)
}

func (s *suite) testRestartWith(t *testing.T, abrupt bool) {
	_, q := s.open(t, transport.QueueConfig{})
	const scheduled, active, far = 50, 10, 5
	start := time.Now()
	due := make([]time.Time, scheduled)
	for i := range scheduled {
		due[i] = start.Add(time.Second + time.Duration(i)*time.Second/scheduled)
		schedule(t, q, numbered("scheduled", i), due[i])
	}
	for i := range active {
		send(t, q, numbered("active", i))
	}
	farSeqs := make([]uint64, far)
	for i := range far {
		farSeqs[i] = schedule(t, q, numbered("far", i), start.Add(time.Hour))
	}
	if time.Now().After(due[0]) {
		t.Logf("scheduling took %v, past the first due time: some messages may activate before the restart", time.Since(start))
	}

	// The server stays down past the first half of the due times, so
	// those are overdue when it comes back and must fire then.
	before := time.Now()
	s.f.Restart(t, abrupt, time.Until(due[scheduled/2]))
	restarted := time.Now()
	overdue := 0
	for _, d := range due {
		if d.Before(restarted) {
			overdue++
		}
	}
	t.Logf("restart (abrupt %v) took %v; %d of %d scheduled messages were due by its end",
		abrupt, restarted.Sub(before), overdue, scheduled)
	if overdue == 0 {
		t.Errorf("no message was overdue when the server came back: the test checks nothing about overdue schedules")
	}

	// Messages overdue when the server came back may activate up to
	// ActivationSlack after that (on a cluster: a leader to elect, the
	// queue stream's source to set up again), as any message may after its
	// due time.
	deadline := due[scheduled-1].Add(s.f.ActivationSlack + awaitMargin)
	if d := restarted.Add(max(s.f.ActivationSlack+awaitMargin, 2*awaitMargin)); d.After(deadline) {
		deadline = d
	}
	ctx, cancel := context.WithDeadline(t.Context(), deadline)
	defer cancel()
	gotScheduled := make([]int, scheduled)
	gotActive := make([]int, active)
	var seqs []uint64
	for received, failures := 0, 0; received < scheduled+active; {
		ds, err := q.Receive(ctx, 20)
		now := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("received %d of %d messages by %v after the restart: %v\nscheduled counts %v\nactive counts %v",
					received, scheduled+active, now.Sub(restarted), err, gotScheduled, gotActive)
			}
			// The client may still be reconnecting: retry a while.
			if failures++; failures > 100 {
				t.Fatalf("Receive after the restart failed %d times, last: %v", failures, err)
			}
			t.Logf("Receive %v after the restart: %v (retrying)", now.Sub(restarted), err)
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
			}
			continue
		}
		for _, d := range ds {
			if err := d.Complete(t.Context()); err != nil {
				t.Errorf("Complete(%s): %v", describe(d.Message), err)
			}
			received++
			seqs = append(seqs, d.Seq)
			if i, ok := number(d.Message, "scheduled"); ok && i < scheduled {
				gotScheduled[i]++
				checkNotEarly(t, arrival{d, now}, due[i])
				continue
			}
			if i, ok := number(d.Message, "active"); ok && i < active {
				gotActive[i]++
				continue
			}
			t.Errorf("received unexpected %s", describe(d.Message))
		}
	}
	for i, n := range gotScheduled {
		if n != 1 {
			t.Errorf("scheduled-%d received %d times, want once", i, n)
		}
	}
	for i, n := range gotActive {
		if n != 1 {
			t.Errorf("active-%d received %d times, want once", i, n)
		}
	}
	checkHomeSeqs(t, q, "active seqs across the restart", seqs)
	expectNone(t, q, quietMargin)

	// The far ones are still pending under the same seqs, and cancellable.
	var pending []uint64
	for _, m := range peekAll(t, q) {
		if m.State == transport.Scheduled {
			pending = append(pending, m.Seq)
		}
	}
	if !slices.Equal(pending, farSeqs) {
		t.Errorf("scheduled messages after the restart: %#x, want %#x", pending, farSeqs)
	}
	for _, seq := range farSeqs {
		if err := q.Cancel(t.Context(), seq); err != nil {
			t.Errorf("Cancel(%#x) after the restart = %v, want nil", seq, err)
		}
	}
	if err := q.Cancel(t.Context(), farSeqs[0]); !errors.Is(err, transport.ErrNotFound) {
		t.Errorf("second Cancel(%#x) after the restart = %v, want %v", farSeqs[0], err, transport.ErrNotFound)
	}
}
