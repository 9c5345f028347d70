package saga_test

// Tests of the issues fixed after the first release: operator cancels as
// steps, truthful dead letters and outcomes, classification of handler
// requests, tombstone retention, and what hooks and handlers can see.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// What hooks see.

type SeeStart struct{ ID string }

type SeeDue struct{}

func TestStepStartedKnowsSagaAndID(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	n := newNode(t, srv.ClientURL())
	qcfg := transport.QueueConfig{Name: "see", LockDuration: 2 * time.Second}
	q := n.openQueue(t, qcfg)
	def := saga.Define[counter]("see")
	saga.StartedBy(def, saga.By(func(m SeeStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], _ SeeStart) error {
			_, err := c.RequestTimeout(100*time.Millisecond, SeeDue{})
			return err
		})
	saga.OnTimeout(def, func(_ context.Context, c *saga.Context[counter], _ SeeDue) error {
		c.MarkComplete()
		return nil
	})
	var mu sync.Mutex
	started := map[string]saga.StepInfo{}
	var log stepLog
	hooks := log.hooks()
	hooks.StepStarted = func(ctx context.Context, info saga.StepInfo) context.Context {
		mu.Lock()
		started[info.MessageType] = info
		mu.Unlock()
		return ctx
	}
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(def), saga.WithQueueConfig(qcfg), saga.WithHooks(hooks))
	if _, err := d.Send(ctxFor(t), SeeStart{ID: "s.1"}); err != nil {
		t.Fatal(err)
	}
	run(t, d)
	testutil.Await(t, 10*time.Second, func() string {
		if len(log.filter(saga.MessageName[SeeDue]())) == 0 {
			return "timeout not handled yet"
		}
		return queueEmpty(t, q)
	})
	mu.Lock()
	defer mu.Unlock()
	for _, typ := range []string{saga.MessageName[SeeStart](), saga.MessageName[SeeDue]()} {
		if info := started[typ]; info.Saga != "see" || info.ID != "s.1" {
			t.Errorf("StepStarted for %s: %+v, want saga see, ID s.1", typ, info)
		}
	}
}
