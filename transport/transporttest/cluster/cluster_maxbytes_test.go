package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/transport"
)

// TestClusterMaxBytesSourcingLags: on an R3 queue whose queue stream
// sources the schedule stream late (here: not at all, its source taken
// away while the test sends), Send still refuses what would take the
// partition past MaxBytes. Sends are paced slower than the transport
// trusts a read of the stream's size (100 ms), so each check reads the
// size again and sees none of the copies waiting in the schedule stream.
// Once the source is back, every accepted message reaches the queue.
func TestClusterMaxBytesSourcingLags(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	b, nc := clusterBroker(t, c)
	ctx := t.Context()
	const name, max, size = "maxbytes-lag", 64 << 10, 8 << 10
	if err := b.DeleteQueue(ctx, name); err != nil {
		t.Fatal(err)
	}
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: name, Replicas: 3, MaxBytes: max})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, queueStream(q))
	if err != nil {
		t.Fatal(err)
	}
	withSource := s.CachedInfo().Config
	noSource := withSource
	noSource.Sources = nil
	if _, err := js.UpdateStream(ctx, noSource); err != nil {
		t.Fatalf("take the queue stream's source away: %v", err)
	}
	body := make([]byte, size)
	stored := 0
	var full error
	for range 2 * max / size {
		if _, err := q.Send(ctx, &transport.Message{Body: body}); err != nil {
			full = err
			break
		}
		stored++
		time.Sleep(150 * time.Millisecond) // pacing: past the 100 ms a size read is trusted
	}
	if !errors.Is(full, transport.ErrQueueFull) {
		t.Fatalf("sending %d-byte messages to an R3 queue with MaxBytes %d, sourcing stalled: %v after %d, want %v",
			size, max, full, stored, transport.ErrQueueFull)
	}
	if stored == 0 || stored > max/size {
		t.Errorf("%d messages of %d bytes accepted under MaxBytes %d while sourcing stalled, want 1 to %d", stored, size, max, max/size)
	}
	if _, err := js.UpdateStream(ctx, withSource); err != nil {
		t.Fatalf("give the queue stream its source back: %v", err)
	}
	// Every accepted message moves into the queue stream, within its cap.
	var info *jetstream.StreamInfo
	for deadline := time.Now().Add(time.Minute); ; {
		if info, err = s.Info(ctx); err == nil && info.State.Msgs == uint64(stored) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling the stream's state
	}
	if err != nil || info.State.Msgs != uint64(stored) || info.State.Bytes > max {
		t.Fatalf("queue stream after sourcing resumed: %+v, %v; want %d messages, at most %d bytes", info.State, err, stored, max)
	}
	t.Logf("queue stream holds %d messages, %d bytes (%d a message)", info.State.Msgs, info.State.Bytes, info.State.Bytes/info.State.Msgs)
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	got := 0
	for got < stored {
		ds, err := q.Receive(rctx, stored-got)
		if err != nil {
			t.Fatalf("received %d of the %d accepted messages: %v", got, stored, err)
		}
		for _, d := range ds {
			got++
			if err := d.Complete(ctx); err != nil {
				t.Errorf("Complete: %v", err)
			}
		}
	}
	t.Logf("%d messages of %d bytes accepted under MaxBytes %d with sourcing stalled, all delivered once it resumed", stored, size, max)
}
