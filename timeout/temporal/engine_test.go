package temporal

import (
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/timeout/timeouttest"
)

// TestConformance runs the timeout conformance suite against the engine
// on a real Temporal dev server, with workers delivering to JetStream,
// and with listings filtered by search attributes.
func TestConformance(t *testing.T) {
	srv, ns := servers(t)
	timeouttest.Run(t, func(t *testing.T) timeouttest.Env {
		c := srv.Client(t)
		b := broker(t, ns)
		tq := newTaskQueue()
		opts := []Option{WithTaskQueue(tq), WithSearchAttributes()}
		startWorker(t, c, b, opts...)
		e, err := New(c, append(opts, WithBroker(b))...)
		if err != nil {
			t.Fatal(err)
		}
		return timeouttest.Env{Scheduler: e, Broker: b}
	}, timeouttest.Features{Slack: 5 * time.Second, ListingLag: 5 * time.Second, RaceRounds: 300})
}

// TestConformanceRouter runs the suite on a timeout.Router whose long
// route is the Temporal engine (without search attributes: listings
// filtered in the client), so that both engines' paths are covered.
func TestConformanceRouter(t *testing.T) {
	srv, ns := servers(t)
	timeouttest.Run(t, func(t *testing.T) timeouttest.Env {
		c := srv.Client(t)
		b := broker(t, ns)
		tq := newTaskQueue()
		startWorker(t, c, b, WithTaskQueue(tq))
		e, err := New(c, WithTaskQueue(tq))
		if err != nil {
			t.Fatal(err)
		}
		r := &timeout.Router{Default: timeout.NewTransport(b), Routes: []timeout.Route{e.Route(1200 * time.Millisecond)}}
		return timeouttest.Env{Scheduler: r, Broker: b}
	}, timeouttest.Features{Slack: 5 * time.Second, ListingLag: 5 * time.Second, RaceRounds: 50})
}
