package timeouttest_test

import (
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/timeout/timeouttest"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

func memoryBroker(t *testing.T) *transport.Broker {
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestTransportOnMemory(t *testing.T) {
	timeouttest.Run(t, func(t *testing.T) timeouttest.Env {
		b := memoryBroker(t)
		return timeouttest.Env{Scheduler: timeout.NewQueue(b), Broker: b}
	}, timeouttest.Features{Slack: 100 * time.Millisecond})
}

// TestTransportOnJetStream runs the suite on the default transport engine,
// which on JetStream activates timeouts early (DefaultEarlyActivation).
func TestTransportOnJetStream(t *testing.T) {
	runOnJetStream(t, timeouttest.Features{Slack: time.Second, EarlyActivation: timeout.DefaultEarlyActivation})
}

// TestTransportOnTimeOnJetStream runs the suite on a transport engine with
// early activation turned off (WithEarlyActivation(0)): messages activate
// at their due time or after, never before.
func TestTransportOnTimeOnJetStream(t *testing.T) {
	runOnJetStream(t, timeouttest.Features{Slack: time.Second}, timeout.WithEarlyActivation(0))
}

// runOnJetStream runs the suite on transport engines made with opts, each
// test on a connection of its own to one embedded server.
func runOnJetStream(t *testing.T, f timeouttest.Features, opts ...timeout.QueueOption) {
	srv, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	timeouttest.Run(t, func(t *testing.T) timeouttest.Env {
		nc, err := srv.Connect()
		if err != nil {
			t.Fatal(err)
		}
		b, err := transport.NewJetStream(nc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close(); nc.Close() })
		return timeouttest.Env{Scheduler: timeout.NewQueue(b, opts...), Broker: b}
	}, f)
}

// TestRouter runs the suite on a router whose long route is a second
// transport engine on the same broker, so both of its paths are covered.
func TestRouter(t *testing.T) {
	timeouttest.Run(t, func(t *testing.T) timeouttest.Env {
		b := memoryBroker(t)
		r := &timeout.Router{
			Default: timeout.NewQueue(b),
			Routes:  []timeout.Route{{Beyond: 400 * time.Millisecond, Engine: "long", Scheduler: timeout.NewQueue(b, timeout.WithEngineName("long"))}},
		}
		return timeouttest.Env{Scheduler: r, Broker: b}
	}, timeouttest.Features{Slack: 100 * time.Millisecond})
}
