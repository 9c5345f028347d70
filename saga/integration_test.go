package saga_test

// Integration tests of the dispatcher against a real embedded nats-server:
// JetStream queues, KV state, scheduled-message timeouts. They check the
// reliability targets (R2, R3, R5: restarts, competing endpoints, hostile input) and the commit protocol
// documented on record in record.go, with fault injection at each step of
// that protocol.

import (
	"fmt"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// Regression tests for bugs found by these tests and fixed.

// TestRegressionIdentityCollisionAcrossQueues: a message without MessageID
// is identified by its sequence number alone ("seq-N"), which is unique
// per queue only. The same saga fed from two queues (or from one queue
// deleted and created again) drops a new message as a redelivery.
func TestRegressionIdentityCollisionAcrossQueues(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	n := newNode(t, srv.ClientURL())
	var ds []*saga.Dispatcher
	var qs []*transport.Queue
	for _, name := range []string{"qa", "qb"} {
		qcfg := transport.QueueConfig{Name: name, LockDuration: 2 * time.Second}
		qs = append(qs, n.openQueue(t, qcfg))
		d := n.dispatcher(t, nil, name, saga.WithSagas(counterSaga()), saga.WithQueueConfig(qcfg))
		if _, err := d.Send(ctxFor(t), Incr{ID: "shared"}); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
		run(t, d)
	}
	// Wait for both steps (a sent message reaches its queue a moment after
	// the send, so an empty queue proves nothing), then for quiet.
	testutil.Await(t, 10*time.Second, func() string {
		if c, _, _ := data[counter](t, ds[0], "counter", "shared"); c.Count < 2 {
			return fmt.Sprintf("count %d, want 2: one Incr came through each queue", c.Count)
		}
		return queueEmpty(t, qs[0]) + queueEmpty(t, qs[1])
	})
	if c, _, _ := data[counter](t, ds[0], "counter", "shared"); c.Count != 2 {
		t.Errorf("count %d, want 2: one Incr came through each queue", c.Count)
	}
}
