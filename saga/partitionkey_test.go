package saga_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type (
	pkStart  struct{ ID string }
	pkNotice struct{ ID string }
)

var pkSaga = saga.Define[struct{}]("partitionkey")

func init() {
	saga.StartedBy(pkSaga, saga.By(func(m pkStart) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[struct{}], m pkStart) error {
			return c.Send("pk-out", pkNotice(m), saga.WithPartitionKey("tenant-"+m.ID))
		})
}

// A PartitionKey given to Dispatcher.Send and to a handler's Send
// reaches the queue with the message, through the step's outbox, and
// chooses the partition as transport's does.
func TestWithPartitionKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	out, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "pk-out", Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	d, err := saga.NewDispatcher(b, memstore.New(), "pk-in", saga.WithSagas(pkSaga))
	if err != nil {
		t.Fatal(err)
	}
	run, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(run) }()
	defer func() { stop(); <-done }()

	ids := []string{"a", "b", "c", "d", "e", "f"}
	for _, id := range ids {
		if _, err := d.Send(ctx, pkStart{ID: id}, saga.WithPartitionKey("tenant-"+id)); err != nil {
			t.Fatal(err)
		}
	}
	// Probes: a plain transport message with each key, whose partition
	// is the one the key chooses.
	for _, id := range ids {
		if _, err := out.Send(ctx, &transport.Message{Body: []byte("probe"), PartitionKey: "tenant-" + id}); err != nil {
			t.Fatal(err)
		}
	}
	probes, sent := map[string]int{}, map[string]int{}
	for len(probes)+len(sent) < 2*len(ids) {
		ds, err := out.Receive(ctx, 10)
		if err != nil {
			t.Fatalf("received %d of %d: %v", len(probes)+len(sent), 2*len(ids), err)
		}
		for _, del := range ds {
			if string(del.Body) == "probe" {
				probes[del.PartitionKey] = transport.Partition(del.Seq)
			} else {
				sent[del.PartitionKey] = transport.Partition(del.Seq)
			}
			if err := del.Complete(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, id := range ids {
		key := "tenant-" + id
		if p, ok := sent[key]; !ok || p != probes[key] {
			t.Errorf("the saga's message with PartitionKey %q: in partition %d (received: %v), want %d as a plain message with the key",
				key, p, ok, probes[key])
		}
	}
}
