package sagaotel_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/saga/sagaotel"
	"github.com/jetsaga/jetsaga/transport"
)

type tenantOrder struct{ ID string }

// TestPartitionKeyAttribute sends a dispatcher two messages, one with a
// PartitionKey and one without: with WithPartitionKeyAttribute the first
// step's span and its jetsaga.steps point carry
// jetsaga.message.partition_key, the second's do not; without the option
// neither does.
func TestPartitionKeyAttribute(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(map[bool]string{true: "on", false: "off"}[on], func(t *testing.T) {
			spans := tracetest.NewInMemoryExporter()
			reader := sdkmetric.NewManualReader()
			opts := []sagaotel.Option{sagaotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))),
				sagaotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))}
			if on {
				opts = append(opts, sagaotel.WithPartitionKeyAttribute())
			}
			tel, err := sagaotel.New(opts...)
			if err != nil {
				t.Fatal(err)
			}
			flow := saga.Define[struct{}]("tenant-order")
			saga.StartedBy(flow, saga.By(func(m tenantOrder) string { return m.ID }),
				func(context.Context, *saga.Context[struct{}], tenantOrder) error { return nil })
			b, err := transport.NewMemory()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			d, err := saga.NewDispatcher(b, memstore.New(), "orders", saga.WithSagas(flow), saga.WithHooks(tel.Hooks()),
				saga.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				t.Fatal(err)
			}
			testutil.RunUntilCleanup(t, d.Run)
			if _, err := d.Send(t.Context(), tenantOrder{ID: "o1"}, saga.WithPartitionKey("tenant-a")); err != nil {
				t.Fatal(err)
			}
			if _, err := d.Send(t.Context(), tenantOrder{ID: "o2"}); err != nil {
				t.Fatal(err)
			}
			testutil.AwaitTrue(t, 10*time.Second, "two step spans", func() bool { return len(spans.GetSpans()) == 2 })

			wantKey := map[string]string{"o1": "", "o2": ""}
			if on {
				wantKey["o1"] = "tenant-a"
			}
			for _, s := range spans.GetSpans() {
				id := attr(s.Attributes, "jetsaga.saga.id")
				if got := attr(s.Attributes, "jetsaga.message.partition_key"); got != wantKey[id] {
					t.Errorf("span of %s: partition key %q, want %q", id, got, wantKey[id])
				}
			}
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(t.Context(), &rm); err != nil {
				t.Fatal(err)
			}
			byKey := map[string]int64{}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "jetsaga.steps" {
						for _, p := range sum.DataPoints {
							k, _ := p.Attributes.Value("jetsaga.message.partition_key")
							byKey[k.AsString()] += p.Value
						}
					}
				}
			}
			want := map[string]int64{"": 2}
			if on {
				want = map[string]int64{"": 1, "tenant-a": 1}
			}
			if len(byKey) != len(want) || byKey[""] != want[""] || byKey["tenant-a"] != want["tenant-a"] {
				t.Errorf("jetsaga.steps by partition key %v, want %v", byKey, want)
			}
		})
	}
}
