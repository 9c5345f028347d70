package cluster_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
	"github.com/jetsaga/jetsaga/transport/transporttest"
)

// TestJetStreamCluster runs the conformance suite on the cluster. Its
// restart feature stops (gracefully or with SIGKILL) the node that leads
// the schedule stream of the queue or topic under test, so that the
// restart tests cover a leader change as well as a node's return.
func TestJetStreamCluster(t *testing.T) { runCluster(t, transporttest.Run) }

// TestJetStreamClusterKeyed runs the suite on the cluster with fairness
// keys on.
func TestJetStreamClusterKeyed(t *testing.T) { runCluster(t, transporttest.RunKeyed) }

func runCluster(t *testing.T, run func(*testing.T, func(*testing.T) *transport.Broker, transporttest.Features)) {
	t.Parallel()
	c := startCluster(t)
	_, admin := clusterBroker(t, c)
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	run(t, func(t *testing.T) *transport.Broker {
		b, _ := clusterBroker(t, c)
		return b
	}, transporttest.Features{
		// A leader change stalls activations for up to the election
		// timeout (4-9s in nats-server's raft).
		ActivationSlack: 10 * time.Second,
		CancelMargin:    500 * time.Millisecond,
		// Through one node, and only through it (its INFO names the
		// others, which would be reached at full speed after a
		// reconnect).
		SlowLink: func(t *testing.T, delay time.Duration) *transport.Broker {
			nc, err := nats.Connect(transporttest.DelayProxy(t, c.ClientURL(0), delay),
				embedded.ForceReplicas(3), nats.IgnoreDiscoveredServers(), nats.MaxReconnects(-1),
				nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
			if err != nil {
				t.Fatalf("connect through the slow link: %v", err)
			}
			// Attaching takes a few requests in one API call.
			b, err := transport.NewJetStream(nc, transport.WithAPITimeout(30*time.Second))
			if err != nil {
				t.Fatalf("NewJetStream: %v", err)
			}
			t.Cleanup(func() {
				b.Close()
				nc.Close()
			})
			return b
		},
		Restart: func(t *testing.T, abrupt bool, downtime time.Duration) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			// Restart tests run one at a time and delete their queues and
			// topics: the schedule streams found are the test's, a queue's
			// (JETSAGA_S_<queue>_<p>) or a topic's (JETSAGA_TS_<topic>_<p>).
			var sched []string
			prefix := map[string]string{}
			for name := range js.StreamNames(ctx).Name() {
				for _, p := range []string{"JETSAGA_S_", "JETSAGA_TS_"} {
					if strings.HasPrefix(name, p) {
						sched = append(sched, name)
						prefix[name] = p
					}
				}
			}
			if len(sched) == 0 {
				t.Fatal("restart: no schedule stream to find a leader of")
			}
			slices.Sort(sched)
			victim, err := c.LeaderOf(ctx, sched[0])
			if err != nil {
				t.Fatalf("restart: %v", err)
			}
			stop := c.Stop
			if abrupt {
				stop = c.Kill
			}
			if err := stop(victim); err != nil && !abrupt {
				t.Fatalf("stop node %d: %v", victim, err)
			}
			time.Sleep(downtime) // the outage itself, not a wait for a condition
			if err := c.Restart(victim); err != nil {
				t.Fatalf("restart node %d: %v", victim, err)
			}
			if err := c.WaitReady(ctx); err != nil {
				t.Fatalf("restart node %d: %v", victim, err)
			}
			// A user's retry loop would ride out the election; the suite's
			// checks expect a queue that answers, as after a restart of one
			// server.
			// Every stream of that queue or topic: its partitions' streams,
			// its dead-letter queue, its subscriptions' dead-letter queues
			// (JETSAGA_SD_<len>_<topic>_<sub>).
			queue := strings.TrimPrefix(sched[0], prefix[sched[0]])
			queue = queue[:strings.LastIndex(queue, "_")]
			for name := range js.StreamNames(ctx).Name() {
				if !strings.Contains(name, "_"+queue+"_") && !strings.HasSuffix(name, "_"+queue) {
					continue // another test's queue
				}
				for {
					sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
					s, err := js.Stream(sctx, name)
					scancel()
					if err == nil && s.CachedInfo().Cluster != nil && s.CachedInfo().Cluster.Leader != "" {
						break
					}
					if err == nil {
						err = fmt.Errorf("cluster info %+v", s.CachedInfo().Cluster)
					}
					select {
					case <-ctx.Done():
						t.Fatalf("restart: stream %s has no leader: %v", name, err)
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
			t.Logf("restarted node %s, leader of %s (abrupt %v, down %v)", c.Name(victim), sched[0], abrupt, downtime.Round(time.Millisecond))
		},
	})
}
