package sagaotel_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/saga/sagaotel"
	"github.com/jetsaga/jetsaga/transport"
)

type (
	Reserved struct{ Seat string }
	release  struct{}
)

// One trace follows a request into a saga, through the timeout the saga
// asked for, to its completion.
func Example() {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	tel, _ := sagaotel.New(sagaotel.WithTracerProvider(tp))

	hold := saga.Define[struct{}]("seat-hold")
	saga.StartedBy(hold, saga.By(func(m Reserved) string { return m.Seat }),
		func(ctx context.Context, c *saga.Context[struct{}], m Reserved) error {
			_, err := c.RequestTimeout(50*time.Millisecond, release{})
			return err
		})
	saga.OnTimeout(hold, func(ctx context.Context, c *saga.Context[struct{}], _ release) error {
		c.MarkComplete()
		return nil
	})

	released := make(chan struct{})
	broker, _ := transport.NewMemory()
	d, _ := saga.NewDispatcher(broker, memstore.New(), "seats", saga.WithSagas(hold),
		saga.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
		saga.WithHooks(tel.Hooks()),
		saga.WithHooks(saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, _ saga.StepResult) {
			if !info.TimeoutDue.IsZero() {
				close(released)
			}
		}}))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go d.Run(ctx)

	reqCtx, req := tp.Tracer("http").Start(ctx, "POST /seats/12A")
	req.End() // ended first, so that it is exported first
	d.Send(reqCtx, Reserved{Seat: "12A"}, tel.Propagate(reqCtx)...)
	<-released

	for _, s := range spans.GetSpans() {
		fmt.Printf("%s (same trace: %t)\n", s.Name, s.SpanContext.TraceID() == req.SpanContext().TraceID())
	}
	// Output:
	// POST /seats/12A (same trace: true)
	// process seats (same trace: true)
	// process seats (same trace: true)
}
