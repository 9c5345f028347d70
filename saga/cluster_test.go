package saga_test

// The saga workload of TestKillWorkers on a 3-node JetStream cluster,
// everything replicated three times (queues, schedule streams, the KV
// bucket), with the nodes failing instead of the workers: one dispatcher
// per node, each connected to its node first (the others are its
// fallbacks), while nodes are SIGKILLed and restarted in turn and the
// leaders of the KV bucket and of the schedule stream step down.
//
// Must hold: every instance reaches its terminal state (only a handled
// timeout completes it, so no timeout was lost); every effect reaches
// r1-effects exactly once; no timeout activates early (the saga records
// it as an anomaly); nothing is dead-lettered.
//
// The default run is the quick form; -jetsaga.soak or JETSAGA_SOAK=1 runs
// more instances through more faults.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/saga/queuestore"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

var soak = flag.Bool("jetsaga.soak", os.Getenv("JETSAGA_SOAK") != "", "run the cluster soak (also JETSAGA_SOAK=1)")

// startCluster starts a 3-node cluster that t closes.
func startCluster(t *testing.T) *embedded.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := embedded.StartCluster(ctx, embedded.ClusterOptions{})
	if err != nil {
		t.Fatalf("start a 3-node cluster: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// clusterNode connects to node i of c first and builds a broker and an R3
// KV store on the connection.
func clusterNode(t *testing.T, c *embedded.Cluster, i int) *node {
	t.Helper()
	nc, err := c.ConnectTo(i)
	if err != nil {
		t.Fatalf("connect to node %d: %v", i, err)
	}
	return nodeOn(t, nc, kvstore.Config{Replicas: 3}, 30*time.Second)
}

func clusterR1QueueConfig() transport.QueueConfig {
	cfg := r1QueueConfig()
	cfg.Replicas = 3
	return cfg
}

// clusterR1Options: as r1Options, with R3 queues and a retry budget that
// outlasts a leader election (nats-server's raft elects within 4-9s): a
// step that fails while a stream has no leader is retried, not
// dead-lettered.
func clusterR1Options() []saga.Option {
	return []saga.Option{
		saga.WithSagas(r1Saga()), saga.WithQueueConfig(clusterR1QueueConfig()),
		saga.WithRetry(saga.RetryPolicy{Immediate: 3, Delayed: 10, Backoff: func(int) time.Duration { return time.Second }}),
		saga.WithDrainTimeout(3 * time.Second),
	}
}

// TestClusterSagas runs the workload with state in an R3 KV bucket
// (kvstore), and with state in the R3 queue's own state (queuestore),
// where each step commits its state and timeouts in one atomic batch.
func TestClusterSagas(t *testing.T) {
	t.Run("kvstore", func(t *testing.T) { testClusterSagas(t, false) })
	t.Run("queuestore", func(t *testing.T) { testClusterSagas(t, true) })
}

func testClusterSagas(t *testing.T, inQueue bool) {
	instances := 200
	if *soak {
		instances = 1000
		t.Log("soak (-jetsaga.soak/JETSAGA_SOAK): 1000 instances, every node killed twice")
	} else {
		t.Log("quick form: 200 instances, every node killed once (the soak runs with -jetsaga.soak or JETSAGA_SOAK=1)")
	}
	began := time.Now()
	c := startCluster(t)

	// Create the queues and the bucket before any dispatcher runs.
	admin := clusterNode(t, c, 0)
	q := admin.openQueue(t, clusterR1QueueConfig())
	effects := admin.openQueue(t, transport.QueueConfig{Name: r1Effects, Replicas: 3})
	storeOf := func(n *node) saga.Store {
		if inQueue {
			return queuestore.New(n.broker, r1Queue)
		}
		return n.store
	}
	sender := admin.dispatcher(t, storeOf(admin), r1Queue, clusterR1Options()...) // sends and reads state; never runs

	var log stepLog
	for i := range c.Size() {
		n := clusterNode(t, c, i)
		d := n.dispatcher(t, storeOf(n), r1Queue, append(clusterR1Options(), saga.WithHooks(log.hooks()))...)
		run(t, d)
	}

	ids := make([]string, instances)
	for i := range ids {
		ids[i] = fmt.Sprintf("c-%04d", i)
	}
	// Faults, in turn, while the starts are fed: kill and restart each
	// node, with stepdowns of the KV bucket and of the schedule stream in
	// between.
	kv := "KV_jetsaga_sagas"
	sched := "JETSAGA_S_" + r1Queue + "_0"
	if inQueue {
		kv = sched // the state's stream: the schedule stream
	}
	var faults []func(ctx context.Context) string
	rounds := 1
	if *soak {
		rounds = 2
	}
	for range rounds {
		for i := range c.Size() {
			faults = append(faults, func(ctx context.Context) string {
				lead, _ := c.LeaderOf(ctx, kv)
				if err := c.Kill(i); err != nil {
					t.Errorf("kill node %d: %v", i, err)
				}
				killed := time.Now()
				// Stay down until the survivors have taken over every
				// stream the node led.
				for _, s := range []string{kv, sched, "JETSAGA_Q_" + r1Queue + "_0"} {
					if _, err := c.LeaderOf(ctx, s); err != nil {
						t.Errorf("no leader for %s with node %d down: %v", s, i, err)
					}
				}
				down := time.Since(killed)
				if err := c.Restart(i); err != nil {
					t.Errorf("restart node %d: %v", i, err)
				}
				if err := c.WaitReady(ctx); err != nil {
					t.Errorf("after restarting node %d: %v", i, err)
				}
				return fmt.Sprintf("killed %s (SIGKILL; KV leader was %s), leaders re-elected in %v, restarted, current after %v",
					c.Name(i), c.Name(lead), down.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
			})
			stream := []string{kv, sched, kv}[i]
			faults = append(faults, func(ctx context.Context) string {
				old, _ := c.LeaderOf(ctx, stream)
				next, err := c.StepDown(ctx, stream)
				if err != nil {
					t.Errorf("step down %s: %v", stream, err)
				}
				return fmt.Sprintf("%s stepped down: %s -> %s", stream, c.Name(old), c.Name(next))
			})
		}
	}
	var wg sync.WaitGroup
	faultCtx, stopFaults := context.WithCancel(t.Context())
	defer stopFaults()
	fed := make(chan struct{})
	wg.Go(func() {
		for k, f := range faults {
			select {
			case <-faultCtx.Done():
				return
			case <-time.After(500 * time.Millisecond): // between faults: steps run undisturbed a moment
			}
			fctx, cancel := context.WithTimeout(faultCtx, time.Minute)
			t.Logf("fault %d of %d at +%v: %s", k+1, len(faults), time.Since(began).Round(time.Millisecond), f(fctx))
			cancel()
		}
		<-fed
	})
	// Feed the starts over the fault phase. A send that fails (its node
	// is down, a leader is being elected) is retried with the same
	// MessageID: duplicate detection makes the retry safe.
	retries := 0
	for i, id := range ids {
		due := time.Duration(300+(i*37)%500) * time.Millisecond
		for attempt := 0; ; attempt++ {
			sctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			_, err := sender.Send(sctx, R1Start{ID: id, DueIn: due}, saga.WithMessageID("start-"+id))
			cancel()
			if err == nil {
				break
			}
			retries++
			if attempt > 30 {
				t.Fatalf("send start %s: %v (after %d attempts)", id, err, attempt+1)
			}
			time.Sleep(200 * time.Millisecond) // before a retry
		}
		time.Sleep(time.Duration(len(faults)) * 8 * time.Second / time.Duration(instances)) // spreads the feed over the faults
	}
	close(fed)
	wg.Wait()
	feedDone := time.Since(began)

	within := 90 * time.Second
	stuck := r1AwaitCompleted(t, sender, ids, within)
	if len(stuck) == 0 {
		testutil.Await(t, 30*time.Second, func() string { return queueEmpty(t, q) })
	}
	// Every instance ends with its "done" effect, sent by its last step: a
	// sent message reaches its queue a moment later, or, if the queue
	// stream's sourcing has to be re-established after a leader failure,
	// after nats-server's source retry backoff (up to 2 minutes).
	completed := time.Now()
	want := 0
	for range ids {
		want += 2 + r1Steps // start, steps, done; "due" effects come on top
	}
	var stored []*transport.Message
	for {
		stored = peekAll(t, effects)
		if len(stored) >= want || time.Since(completed) > 3*time.Minute || len(stuck) > 0 {
			break
		}
		select {
		case <-t.Context().Done():
		case <-time.After(200 * time.Millisecond): // polling the effects queue
		}
	}
	t.Logf("effects: %d stored %v after the last instance completed (at least %d expected)", len(stored), time.Since(completed).Round(time.Millisecond), want)
	got := r1Count(t, stored)
	r1Stuck(t, sender, stuck, within, got)
	bad := r1Verify(t, ids, got, q, effects)
	counts := map[saga.Outcome]int{}
	conflicts, redelivered := 0, 0
	for _, e := range log.filter("") {
		counts[e.Result.Outcome]++
		conflicts += e.Result.Conflicts
		if e.Info.DeliveryCount > 1 {
			redelivered++
		}
	}
	t.Logf("%d instances terminal of %d, %d effects stored (%d instances with wrong effects), %d faults, %d start sends retried; feed+faults %v, total %v",
		instances-len(stuck), instances, len(stored), bad, len(faults), retries, feedDone.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	t.Logf("steps: %d handled, %d duplicate (redelivered after commit), %d retried, %d dropped, %d dead-lettered; %d on a redelivery; %d conflicts",
		counts[saga.Handled], counts[saga.Duplicate], counts[saga.Retried], counts[saga.Dropped], counts[saga.DeadLettered], redelivered, conflicts)
}
