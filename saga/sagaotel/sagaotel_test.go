package sagaotel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/saga/sagaotel"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"

	"github.com/nats-io/nats.go/jetstream"
)

// The saga under test: an order started by OrderPlaced waits for a
// timeout (short, or an hour for a "Slow" order), which completes it and
// tells the events queue. Broken orders fail for good; a Flaky one fails
// once, then succeeds on its delayed retry.
type (
	OrderPlaced struct {
		Order              string
		Slow, Broken, Flak bool
	}
	Expired struct{ Order string }
	expiry  struct{}
)

func (OrderPlaced) MessageName() string { return "test.OrderPlaced" }
func (Expired) MessageName() string     { return "test.Expired" }
func (expiry) MessageName() string      { return "test.Expiry" }

type env struct {
	spans   *tracetest.InMemoryExporter
	reader  *sdkmetric.ManualReader
	tracer  trace.Tracer
	tel     *sagaotel.Telemetry
	d       *saga.Dispatcher
	broker  *transport.Broker
	mu      sync.Mutex
	done    []saga.StepInfo
	results []saga.StepResult
}

func order(flaky *atomic.Bool) saga.Saga {
	d := saga.Define[struct{ Order string }]("order")
	saga.StartedBy(d, saga.By(func(m OrderPlaced) string { return m.Order }),
		func(ctx context.Context, c *saga.Context[struct{ Order string }], m OrderPlaced) error {
			if m.Broken {
				return saga.Permanent(errors.New("broken order"))
			}
			if m.Flak && flaky.CompareAndSwap(true, false) {
				return errors.New("warehouse briefly unavailable")
			}
			c.Data.Order = m.Order
			after := 200 * time.Millisecond
			if m.Slow {
				after = time.Hour
			}
			_, err := c.RequestTimeout(after, expiry{})
			return err
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[struct{ Order string }], _ expiry) error {
		c.MarkComplete()
		return c.Send("events", Expired{Order: c.ID()})
	})
	return d
}

func start(t *testing.T, broker *transport.Broker, store saga.Store) *env {
	t.Helper()
	e := &env{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader(), broker: broker}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(e.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	e.tracer = tp.Tracer("test")
	var err error
	e.tel, err = sagaotel.New(sagaotel.WithTracerProvider(tp), sagaotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	flaky := &atomic.Bool{}
	flaky.Store(true)
	e.d, err = saga.NewDispatcher(broker, store, "orders", saga.WithSagas(order(flaky)),
		saga.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		saga.WithRetry(saga.RetryPolicy{Immediate: -1, Delayed: 1, Backoff: func(int) time.Duration { return 50 * time.Millisecond }}),
		saga.WithHooks(e.tel.Hooks()),
		saga.WithHooks(saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, res saga.StepResult) {
			e.mu.Lock()
			e.done = append(e.done, info)
			e.results = append(e.results, res)
			e.mu.Unlock()
		}}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.tel.ObservePendingTimeouts(e.d); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	finished := make(chan struct{})
	go func() { defer close(finished); _ = e.d.Run(ctx) }()
	t.Cleanup(func() { stop(); <-finished })
	return e
}

// steps counts finished steps of message type typ with an outcome.
func (e *env) steps(typ string, o saga.Outcome) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for i, info := range e.done {
		if info.MessageType == typ && e.results[i].Outcome == o {
			n++
		}
	}
	return n
}

func TestTraceAcrossTimeoutMemory(t *testing.T) {
	broker, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { broker.Close() })
	scenario(t, start(t, broker, memstore.New()))
}

func TestTraceAcrossTimeoutJetStream(t *testing.T) {
	srv := testutil.StartServer(t, embedded.Options{})
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	broker, err := transport.NewJetStream(nc, transport.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { broker.Close() })
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := kvstore.New(context.Background(), js, kvstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	scenario(t, start(t, broker, store))
}

// scenario: an HTTP request's span sends OrderPlaced; its step requests a
// timeout; the timeout's step completes the saga and sends Expired. One
// trace spans the request, both steps and the Expired message.
func scenario(t *testing.T, e *env) {
	ctx := context.Background()
	reqCtx, req := e.tracer.Start(ctx, "POST /orders")
	if _, err := e.d.Send(reqCtx, OrderPlaced{Order: "o1"}, e.tel.Propagate(reqCtx)...); err != nil {
		t.Fatal(err)
	}
	req.End()
	traceID := req.SpanContext().TraceID()
	testutil.AwaitTrue(t, 20*time.Second, "the timeout's step", func() bool { return e.steps("test.Expiry", saga.Handled) == 1 })

	// The other metrics: a pending timeout, a dead letter, a retry.
	for _, m := range []OrderPlaced{{Order: "slow", Slow: true}, {Order: "bad", Broken: true}, {Order: "flaky", Flak: true, Slow: true}} {
		if _, err := e.d.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	testutil.AwaitTrue(t, 20*time.Second, "the other steps", func() bool {
		return e.steps("test.OrderPlaced", saga.Handled) == 3 && e.steps("test.OrderPlaced", saga.DeadLettered) == 1 &&
			e.steps("test.OrderPlaced", saga.Retried) == 1
	})

	// Traces.
	var started, timedOut *tracetest.SpanStub
	spans := e.spans.GetSpans()
	for i := range spans {
		s := &spans[i]
		if s.Name != "process orders" || s.SpanContext.TraceID() != traceID {
			continue
		}
		switch attr(s.Attributes, "jetsaga.message.type") {
		case "test.OrderPlaced":
			started = s
		case "test.Expiry":
			timedOut = s
		}
	}
	if started == nil || timedOut == nil {
		t.Fatalf("no start and timeout spans in trace %s: %v", traceID, names(spans))
	}
	if started.Parent.SpanID() != req.SpanContext().SpanID() || started.SpanKind != trace.SpanKindConsumer {
		t.Errorf("start step: parent %s kind %v, want the request %s", started.Parent.SpanID(), started.SpanKind, req.SpanContext().SpanID())
	}
	if timedOut.Parent.SpanID() != started.SpanContext.SpanID() {
		t.Errorf("timeout step's parent %s, want the start step %s", timedOut.Parent.SpanID(), started.SpanContext.SpanID())
	}
	if len(timedOut.Links) != 1 || timedOut.Links[0].SpanContext.SpanID() != started.SpanContext.SpanID() {
		t.Errorf("timeout step links: %+v", timedOut.Links)
	}
	for k, want := range map[string]string{
		"messaging.system": "jetsaga", "messaging.operation.type": "process", "messaging.destination.name": "orders",
		"jetsaga.saga.name": "order", "jetsaga.saga.id": "o1", "jetsaga.step.outcome": "handled",
		"messaging.message.conversation_id": "order/o1",
	} {
		if got := attr(timedOut.Attributes, k); got != want {
			t.Errorf("timeout span %s = %q, want %q", k, got, want)
		}
	}
	if attr(timedOut.Attributes, "jetsaga.timeout.due") == "" || timedOut.Status.Code != codes.Ok {
		t.Errorf("timeout span: %v %v", timedOut.Attributes, timedOut.Status)
	}
	for _, s := range spans {
		if attr(s.Attributes, "jetsaga.step.outcome") == "dead-lettered" && s.Status.Code != codes.Error {
			t.Errorf("dead-lettered step's status %v", s.Status)
		}
	}

	// The message the saga sent carries the trace on.
	events, err := e.broker.Queue(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	var tp string
	testutil.AwaitTrue(t, 20*time.Second, "the Expired event", func() bool {
		ms, err := events.Peek(ctx, 0, 1)
		if err != nil || len(ms) == 0 {
			return false
		}
		tp = ms[0].Properties["otel-traceparent"]
		return true
	})
	if !strings.Contains(tp, traceID.String()) || !strings.Contains(tp, timedOut.SpanContext.SpanID().String()) {
		t.Errorf("Expired's traceparent %q: want trace %s, span %s", tp, traceID, timedOut.SpanContext.SpanID())
	}
	if got := e.tel.Extract(ctx, map[string]string{"otel-traceparent": tp}); trace.SpanContextFromContext(got).TraceID() != traceID {
		t.Errorf("Extract: %v", trace.SpanContextFromContext(got))
	}

	// Metrics.
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	var lateness, handlerLateness metricdata.HistogramDataPoint[float64]
	var pending int64 = -1
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					o, _ := p.Attributes.Value("jetsaga.step.outcome")
					sums[m.Name+"/"+o.AsString()] += p.Value
				}
			case metricdata.Histogram[float64]:
				switch m.Name {
				case "jetsaga.timeout.lateness":
					lateness = d.DataPoints[0]
				case "jetsaga.timeout.handler_lateness":
					handlerLateness = d.DataPoints[0]
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if s, _ := p.Attributes.Value("jetsaga.saga.name"); s.AsString() == "order" {
						pending = p.Value
					}
				}
			}
		}
	}
	for k, want := range map[string]int64{
		"jetsaga.steps/handled": 4, "jetsaga.steps/dead-lettered": 1, "jetsaga.steps/retried": 1,
		"jetsaga.dead_letters/dead-lettered": 1, "jetsaga.retries/retried": 1,
	} {
		if sums[k] != want {
			t.Errorf("%s = %d, want %d (all: %v)", k, sums[k], want, sums)
		}
	}
	if v, ok := lateness.Min.Value(); lateness.Count != 1 || !ok || v < 0 || v > 5 {
		t.Errorf("timeout lateness: %+v", lateness)
	}
	// The handler gets the timeout after it was enqueued.
	if v, ok := handlerLateness.Min.Value(); handlerLateness.Count != 1 || !ok || v < lateness.Sum || v > 5 {
		t.Errorf("timeout handler lateness: %+v, want one, at least the activation's %vs", handlerLateness, lateness.Sum)
	}
	if pending != 2 { // slow and flaky wait an hour
		t.Errorf("pending timeouts gauge %d, want 2", pending)
	}
}

func attr(kvs []attribute.KeyValue, k string) string {
	for _, kv := range kvs {
		if string(kv.Key) == k {
			return kv.Value.String()
		}
	}
	return ""
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, fmt.Sprintf("%s(%s)", s.Name, attr(s.Attributes, "jetsaga.message.type")))
	}
	return out
}

func TestPropertyKeys(t *testing.T) {
	props := map[string]string{}
	tel, err := sagaotel.New()
	if err != nil {
		t.Fatal(err)
	}
	tel.Inject(context.Background(), props) // no span: nothing to carry
	if len(props) != 0 {
		t.Fatalf("injected without a span: %v", props)
	}
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "x")
	defer span.End()
	tel.Inject(ctx, props)
	for k := range props {
		if len(k) > 64 || strings.Trim(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
			t.Errorf("property key %q is not [A-Za-z0-9_-]{1,64}", k)
		}
	}
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Validate(&transport.Message{Properties: props}); err != nil {
		t.Fatalf("the transport refuses the trace properties: %v", err)
	}
	if _, ok := props["otel-traceparent"]; !ok {
		t.Fatalf("no otel-traceparent: %v", props)
	}
}

// TestTimeoutLatenessMetrics feeds StepStarted the StepInfo of an
// early-activated timeout and of a late one: activation lateness is
// clamped at 0 for the first, handler lateness is the step's start minus
// the due time for both, and redeliveries are not counted again.
func TestTimeoutLatenessMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	tel, err := sagaotel.New(sagaotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	due := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	step := func(enqueued, started time.Duration, deliveries int) {
		ctx := tel.Hooks().StepStarted(t.Context(), saga.StepInfo{Queue: "q", Saga: "s", DeliveryCount: deliveries,
			TimeoutDue: due, EnqueuedAt: due.Add(enqueued), StartedAt: due.Add(started)})
		tel.Hooks().StepDone(ctx, saga.StepInfo{Queue: "q", Saga: "s"}, saga.StepResult{Outcome: saga.Handled})
	}
	step(-300*time.Millisecond, 2*time.Millisecond, 1) // activated early, held until due
	step(250*time.Millisecond, 270*time.Millisecond, 1)
	step(time.Minute, time.Minute, 2) // a redelivery: not counted
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.HistogramDataPoint[float64]{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && len(h.DataPoints) == 1 {
				got[m.Name] = h.DataPoints[0]
			}
		}
	}
	for name, want := range map[string][2]float64{ // min, max
		"jetsaga.timeout.lateness":         {0, 0.25},
		"jetsaga.timeout.handler_lateness": {0.002, 0.27},
	} {
		p := got[name]
		lo, _ := p.Min.Value()
		hi, _ := p.Max.Value()
		if p.Count != 2 || !near(lo, want[0]) || !near(hi, want[1]) {
			t.Errorf("%s: count %d, min %v, max %v; want 2, %v, %v", name, p.Count, lo, hi, want[0], want[1])
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// TestBeyondToleranceMetric: the TimeoutLate hook records how late a
// timeout beyond its tolerance was, by policy and whether it was skipped.
func TestBeyondToleranceMetric(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	tel, err := sagaotel.New(sagaotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	due := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	late := func(d time.Duration, p saga.CatchUpPolicy, skipped bool) {
		tel.Hooks().TimeoutLate(t.Context(), saga.LateTimeout{Saga: "s", ID: "i", Type: "reminder", Policy: p, Skipped: skipped,
			Lateness: saga.Lateness{Due: due, Late: d, Tolerance: time.Minute}})
	}
	late(2*time.Hour, saga.CatchUpSkip, true)
	late(3*time.Hour, saga.CatchUpSkip, true)
	late(90*time.Second, saga.CatchUpLate, false)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.HistogramDataPoint[float64]{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "jetsaga.timeout.beyond_tolerance" {
				for _, p := range h.DataPoints {
					policy, _ := p.Attributes.Value("jetsaga.timeout.policy")
					got[policy.AsString()] = p
				}
			}
		}
	}
	if p := got["skip"]; p.Count != 2 || !near(p.Sum, 5*3600) {
		t.Errorf("skip: count %d, sum %v; want 2, 18000", p.Count, p.Sum)
	}
	if p := got["late"]; p.Count != 1 || !near(p.Sum, 90) {
		t.Errorf("late: count %d, sum %v; want 1, 90", p.Count, p.Sum)
	}
}
