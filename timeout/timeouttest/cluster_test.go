package timeouttest_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/timeout/timeouttest"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

func TestMain(m *testing.M) {
	embedded.RunChildIfRequested() // the nodes of TestTransportOnCluster
	os.Exit(m.Run())
}

// TestTransportOnCluster runs the suite on a 3-node JetStream cluster
// with every stream replicated three times. Each subtest connects to a
// different node first, so that requests cross the routes.
func TestTransportOnCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := embedded.StartCluster(ctx, embedded.ClusterOptions{})
	if err != nil {
		t.Fatalf("start a 3-node cluster: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	var next atomic.Int64
	timeouttest.Run(t, func(t *testing.T) timeouttest.Env {
		nc, err := c.ConnectTo(int(next.Add(1))%c.Size(), embedded.ForceReplicas(3), nats.RetryOnFailedConnect(true))
		if err != nil {
			t.Fatal(err)
		}
		b, err := transport.NewJetStream(nc, transport.WithAPITimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close(); nc.Close() })
		return timeouttest.Env{Scheduler: timeout.NewQueue(b), Broker: b}
	}, timeouttest.Features{Slack: time.Second, EarlyActivation: timeout.DefaultEarlyActivation})
}
