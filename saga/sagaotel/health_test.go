package sagaotel_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/saga/sagaotel"
	"github.com/jetsaga/jetsaga/transport"
)

type Ping struct{ ID string }

// ObserveHealth reports a dispatcher waiting out an outage: the gauge
// jetsaga.dispatcher.waiting is 1 while a handler's dependency is
// unavailable and 0 once it is back; the waiting steps count with outcome
// "waiting".
func TestObserveHealth(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	tel, err := sagaotel.New(sagaotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	broker, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	var down atomic.Bool
	down.Store(true)
	def := saga.Define[struct{}]("ping")
	saga.StartedBy(def, saga.By(func(m Ping) string { return m.ID }),
		func(context.Context, *saga.Context[struct{}], Ping) error {
			if down.Load() {
				return fmt.Errorf("pong service: %w", saga.ErrUnavailable)
			}
			return nil
		})
	d, err := saga.NewDispatcher(broker, memstore.New(), "pings", saga.WithSagas(def), saga.WithHooks(tel.Hooks()),
		saga.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tel.ObserveHealth(d); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() { defer close(finished); _ = d.Run(ctx) }()
	t.Cleanup(func() { stop(); <-finished; broker.Close() })
	if _, err := d.Send(t.Context(), Ping{ID: "p"}); err != nil {
		t.Fatal(err)
	}
	gauge := func() (waiting int64, waitingSteps int64) {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(t.Context(), &rm); err != nil {
			t.Fatal(err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch data := m.Data.(type) {
				case metricdata.Gauge[int64]:
					if m.Name == "jetsaga.dispatcher.waiting" && len(data.DataPoints) == 1 {
						waiting = data.DataPoints[0].Value
					}
				case metricdata.Sum[int64]:
					if m.Name == "jetsaga.steps" {
						for _, p := range data.DataPoints {
							if o, _ := p.Attributes.Value("jetsaga.step.outcome"); o.AsString() == string(saga.Waiting) {
								waitingSteps += p.Value
							}
						}
					}
				}
			}
		}
		return waiting, waitingSteps
	}
	testutil.Await(t, 20*time.Second, func() string {
		if w, n := gauge(); w != 1 || n < 2 {
			return fmt.Sprintf("jetsaga.dispatcher.waiting %d, waiting steps %d: want 1 and at least 2", w, n)
		}
		return ""
	})
	down.Store(false)
	testutil.Await(t, 20*time.Second, func() string {
		if w, _ := gauge(); w != 0 {
			return fmt.Sprintf("jetsaga.dispatcher.waiting %d after the dependency came back", w)
		}
		return ""
	})
}
