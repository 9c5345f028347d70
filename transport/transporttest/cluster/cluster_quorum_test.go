package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// TestClusterStateWithoutQuorum: a commit of a queue's state while its
// stream has lost quorum (two of three nodes stopped) fails with an error
// matching transport.ErrUnavailable, never ErrStateConflict — also when it
// is refused because an earlier commit of the record is still proposed
// and not applied (JetStream's "wrong last sequence" without a number).
// A caller that reloads and retries at once on a conflict, as sagas do,
// would otherwise spend its retries in milliseconds. Once the nodes are
// back, the record commits at its revision or the one the earlier commit
// left.
func TestClusterStateWithoutQuorum(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	b, _ := clusterBroker(t, c)
	ctx := t.Context()
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "quorum"})
	if err != nil {
		t.Fatal(err)
	}
	r1, err := q.CommitState(ctx, transport.StateCommit{Key: "k", Value: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	lead, err := c.LeaderOf(ctx, scheduleStream(q))
	if err != nil {
		t.Fatal(err)
	}
	var stopped []int
	for i := range c.Size() {
		if i != lead {
			if err := c.Stop(i); err != nil {
				t.Fatal(err)
			}
			stopped = append(stopped, i)
		}
	}
	for attempt := range 3 {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := q.CommitState(actx, transport.StateCommit{Key: "k", Value: []byte("2"), Rev: r1.Rev})
		cancel()
		if err == nil {
			t.Fatalf("attempt %d: CommitState without quorum succeeded", attempt)
		}
		if errors.Is(err, transport.ErrStateConflict) || !errors.Is(err, transport.ErrUnavailable) {
			t.Fatalf("attempt %d: CommitState without quorum: %v; want an error matching ErrUnavailable, not ErrStateConflict", attempt, err)
		}
		t.Logf("attempt %d: %v", attempt, err)
	}
	for _, i := range stopped {
		if err := c.Restart(i); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	for {
		v, rev, err := q.LoadState(wctx, "k")
		if err == nil {
			if _, err = q.CommitState(wctx, transport.StateCommit{Key: "k", Value: append(v, '+'), Rev: rev}); err == nil {
				break
			}
		}
		if wctx.Err() != nil {
			t.Fatalf("no commit within a minute of the nodes' return: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // a leader being elected: nothing to await but the commit itself
	}
}
