// Package sagaotel traces and measures jetsaga sagas with OpenTelemetry,
// through the dispatcher's hooks (saga.Hooks); the saga package itself
// does not depend on OpenTelemetry.
//
//	tel, err := sagaotel.New() // the global tracer and meter providers
//	d, err := saga.NewDispatcher(broker, store, "auth", saga.WithSagas(TwoFactor), saga.WithHooks(tel.Hooks()))
//	d.Send(ctx, CodeRequested{...}, tel.Propagate(ctx)...) // the request's trace goes on in the saga
//
// # Traces
//
// Every step is a span of kind Consumer named "process <queue>", with
// OpenTelemetry's messaging attributes (messaging.system "jetsaga",
// messaging.operation.type and .name "process",
// messaging.destination.name, messaging.message.conversation_id for the
// saga instance) and jetsaga's own (jetsaga.saga.name, jetsaga.saga.id,
// jetsaga.message.type, jetsaga.message.seq, jetsaga.delivery_count,
// jetsaga.step.outcome, jetsaga.timeout.due, jetsaga.timeout.lateness;
// with WithPartitionKeyAttribute, jetsaga.message.partition_key).
// A step that ends in an error (retried, dead-lettered, abandoned) has
// status Error and the error recorded.
//
// Trace context travels in message properties: every message a step
// sends, publishes, replies or requests as a timeout carries the step's
// context (W3C traceparent and tracestate by default, under the property
// keys "otel-traceparent" and "otel-tracestate": a propagator's keys are
// prefixed with "otel-" and mapped into the [A-Za-z0-9_-] that property
// keys allow). The step that receives the message starts its span as a
// child of that context, with a link to it, so that one trace follows a
// saga from the message that started it through its timeouts to its
// completion, and on to the messages it sends. Propagate gives
// Dispatcher.Send (from an HTTP handler, say) the caller's context.
//
// # Metrics
//
//   - jetsaga.steps ({step}): steps by jetsaga.step.outcome, saga and
//     queue (and, with WithPartitionKeyAttribute, by
//     jetsaga.message.partition_key, as every step metric below);
//   - jetsaga.step.duration (s): a histogram of step durations;
//   - jetsaga.step.conflicts ({conflict}): optimistic-concurrency
//     conflicts that made a step run again;
//   - jetsaga.retries ({message}) and jetsaga.dead_letters ({message}):
//     delayed retries scheduled and messages dead-lettered;
//   - jetsaga.timeout.lateness (s): how late timeouts were activated,
//     EnqueuedAt minus the due time (0 for a timeout activated early, as
//     the JetStream engine does by default, see
//     timeout.WithEarlyActivation), on their first delivery;
//   - jetsaga.timeout.handler_lateness (s): how late their handlers got
//     them, the step's start minus the due time (StepInfo.StartedAt), on
//     their first delivery: what a user of the saga waits, including the
//     receive and, with early activation, the hold;
//   - jetsaga.timeout.beyond_tolerance (s): how late the timeouts handled
//     beyond their type's catch-up tolerance were (saga.CatchUp,
//     saga.HandleLate), by saga, jetsaga.message.type,
//     jetsaga.timeout.policy (fire, skip, coalesce, late) and
//     jetsaga.timeout.skipped: its count is how many a policy skipped or
//     handed to a late handler (Hooks.TimeoutLate);
//   - jetsaga.timeouts.pending ({timeout}): with ObservePendingTimeouts,
//     the pending timeouts of a dispatcher by saga, read at each
//     collection from Dispatcher.ScheduledTimeouts (which browses the
//     dispatcher's queue: one read per scheduled message, so collect it
//     at a modest interval on queues with very many timeouts);
//   - jetsaga.dispatcher.waiting ({dispatcher}) and
//     jetsaga.dispatcher.waiting_for (s): with ObserveHealth, 1 while the
//     dispatcher waits out an outage (saga.ErrUnavailable, see
//     Dispatcher.Health), else 0, and for how long it has waited. Each
//     step attempt that waited counts in jetsaga.steps with outcome
//     "waiting", and its span carries the event jetsaga.waiting.
//
// # Recurring schedules
//
// ScheduleHooks gives schedule.WithHooks hooks that count the occurrences
// a timeout/schedule Scheduler's Run handles:
//
//   - jetsaga.schedule.occurrences ({occurrence}): by jetsaga.schedule.name,
//     jetsaga.schedule.outcome (sent, skipped) and jetsaga.schedule.late
//     (beyond the schedule's catch-up tolerance): fired, skipped and late
//     occurrences;
//   - jetsaga.schedule.lateness (s): how late occurrences were sent, by
//     jetsaga.schedule.name.
package sagaotel

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetsaga/jetsaga/saga"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/jetsaga/jetsaga/saga/sagaotel"

// PropertyPrefix starts the message property keys that carry trace
// context.
const PropertyPrefix = "otel-"

// Option configures New.
type Option func(*config)

type config struct {
	tp           trace.TracerProvider
	mp           metric.MeterProvider
	prop         propagation.TextMapPropagator
	partitionKey bool
}

// WithTracerProvider sets the tracer provider. Default: otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithMeterProvider sets the meter provider. Default: otel.GetMeterProvider().
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithPropagator sets how trace context is written into and read from
// message properties. Default: W3C trace context (traceparent,
// tracestate) and baggage.
func WithPropagator(p propagation.TextMapPropagator) Option { return func(c *config) { c.prop = p } }

// WithPartitionKeyAttribute adds the incoming message's PartitionKey (when
// it has one) to every step's span and metrics, as the attribute
// jetsaga.message.partition_key. Off by default: a metric gets one series
// per key, so turn it on only where keys are few (tenants, regions), not
// where they are per customer or per order.
func WithPartitionKeyAttribute() Option { return func(c *config) { c.partitionKey = true } }

// Telemetry makes the hooks that trace and measure a dispatcher's steps.
type Telemetry struct {
	tracer       trace.Tracer
	meter        metric.Meter
	prop         propagation.TextMapPropagator
	partitionKey bool // WithPartitionKeyAttribute

	steps, conflicts, retries, deadLetters metric.Int64Counter
	duration, lateness, handlerLateness    metric.Float64Histogram
	beyondTolerance                        metric.Float64Histogram
}

// New returns a Telemetry on the given (or global) providers.
func New(opts ...Option) (*Telemetry, error) {
	c := config{}
	for _, o := range opts {
		o(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.prop == nil {
		c.prop = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	t := &Telemetry{tracer: c.tp.Tracer(ScopeName), meter: c.mp.Meter(ScopeName), prop: c.prop, partitionKey: c.partitionKey}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		m, err := t.meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return m
	}
	t.steps = counter("jetsaga.steps", "{step}", "Saga steps by outcome.")
	t.conflicts = counter("jetsaga.step.conflicts", "{conflict}", "Optimistic-concurrency conflicts that made a step run again.")
	t.retries = counter("jetsaga.retries", "{message}", "Messages rescheduled for a delayed retry.")
	t.deadLetters = counter("jetsaga.dead_letters", "{message}", "Messages moved to the dead-letter queue.")
	var err error
	t.duration, err = t.meter.Float64Histogram("jetsaga.step.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of saga steps, from receipt to settlement."))
	errs = append(errs, err)
	latenessBuckets := metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
	t.lateness, err = t.meter.Float64Histogram("jetsaga.timeout.lateness", metric.WithUnit("s"),
		metric.WithDescription("How late timeouts were activated: enqueue time minus due time."), latenessBuckets)
	errs = append(errs, err)
	t.handlerLateness, err = t.meter.Float64Histogram("jetsaga.timeout.handler_lateness", metric.WithUnit("s"),
		metric.WithDescription("How late timeouts reached their handlers: step start minus due time."), latenessBuckets)
	errs = append(errs, err)
	t.beyondTolerance, err = t.meter.Float64Histogram("jetsaga.timeout.beyond_tolerance", metric.WithUnit("s"),
		metric.WithDescription("How late timeouts handled beyond their type's catch-up tolerance were: step start minus due time."),
		metric.WithExplicitBucketBoundaries(1, 10, 60, 300, 900, 3600, 4*3600, 24*3600, 7*24*3600))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return t, nil
}

// timeoutLate records a timeout handled beyond its tolerance.
func (t *Telemetry) timeoutLate(ctx context.Context, l saga.LateTimeout) {
	t.beyondTolerance.Record(ctx, l.Late.Seconds(), metric.WithAttributes(
		attribute.String("jetsaga.saga.name", l.Saga), attribute.String("jetsaga.message.type", l.Type),
		attribute.String("jetsaga.timeout.policy", l.Policy.String()), attribute.Bool("jetsaga.timeout.skipped", l.Skipped)))
}

// Hooks returns the hooks to give saga.WithHooks.
func (t *Telemetry) Hooks() saga.Hooks {
	return saga.Hooks{StepStarted: t.stepStarted, StepDone: t.stepDone, Outgoing: t.outgoing, TimeoutLate: t.timeoutLate}
}

// Propagate returns send options that carry ctx's trace context, for
// Dispatcher.Send and SendTo called outside a saga step.
func (t *Telemetry) Propagate(ctx context.Context) []saga.SendOption {
	props := map[string]string{}
	t.Inject(ctx, props)
	out := make([]saga.SendOption, 0, len(props))
	for k, v := range props {
		out = append(out, saga.WithProperty(k, v))
	}
	return out
}

// Inject writes ctx's trace context into message properties (for
// messages sent with the transport directly).
func (t *Telemetry) Inject(ctx context.Context, props map[string]string) {
	t.prop.Inject(ctx, carrier(props))
}

// Extract reads the trace context that message properties carry.
func (t *Telemetry) Extract(ctx context.Context, props map[string]string) context.Context {
	return t.prop.Extract(ctx, carrier(props))
}

// carrier maps a propagator's header names to property keys: prefixed
// with PropertyPrefix, lower case, characters outside [A-Za-z0-9_-]
// replaced by '_', at most 64 bytes.
type carrier map[string]string

func propertyKey(k string) string {
	b := []byte(PropertyPrefix + strings.ToLower(k))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	return string(b)
}

func (c carrier) Get(k string) string { return c[propertyKey(k)] }

func (c carrier) Set(k, v string) {
	if c != nil {
		c[propertyKey(k)] = v
	}
}

func (c carrier) Keys() []string {
	var out []string
	for k := range c {
		if rest, ok := strings.CutPrefix(k, PropertyPrefix); ok {
			out = append(out, rest)
		}
	}
	return out
}

type spanKey struct{}

func (t *Telemetry) stepStarted(ctx context.Context, info saga.StepInfo) context.Context {
	parent := t.Extract(ctx, info.Properties)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(t.stepAttrs(info)...)}
	if sc := trace.SpanContextFromContext(parent); sc.IsValid() && sc.IsRemote() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	ctx, span := t.tracer.Start(parent, "process "+info.Queue, opts...)
	if !info.TimeoutDue.IsZero() {
		late := max(info.EnqueuedAt.Sub(info.TimeoutDue), 0)
		handlerLate := max(info.StartedAt.Sub(info.TimeoutDue), 0)
		span.SetAttributes(attribute.String("jetsaga.timeout.due", info.TimeoutDue.UTC().Format(time.RFC3339Nano)),
			attribute.Float64("jetsaga.timeout.lateness", late.Seconds()),
			attribute.Float64("jetsaga.timeout.handler_lateness", handlerLate.Seconds()))
		if info.DeliveryCount <= 1 {
			attrs := metric.WithAttributes(t.metricAttrs(info)...)
			t.lateness.Record(ctx, late.Seconds(), attrs)
			t.handlerLateness.Record(ctx, handlerLate.Seconds(), attrs)
		}
	}
	return context.WithValue(ctx, spanKey{}, span)
}

// metricAttrs are the attributes of a step's metrics: its saga and queue,
// and with WithPartitionKeyAttribute its partition key.
func (t *Telemetry) metricAttrs(info saga.StepInfo, more ...attribute.KeyValue) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, len(more)+3)
	attrs = append(attrs, more...)
	attrs = append(attrs, attribute.String("jetsaga.saga.name", info.Saga), attribute.String("messaging.destination.name", info.Queue))
	if t.partitionKey && info.PartitionKey != "" {
		attrs = append(attrs, attribute.String("jetsaga.message.partition_key", info.PartitionKey))
	}
	return attrs
}

func (t *Telemetry) stepAttrs(info saga.StepInfo) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "jetsaga"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.destination.name", info.Queue),
		attribute.String("jetsaga.message.type", info.MessageType),
		attribute.String("jetsaga.message.seq", strconv.FormatUint(info.Seq, 10)),
		attribute.Int("jetsaga.delivery_count", info.DeliveryCount),
	}
	if info.MessageID != "" {
		attrs = append(attrs, attribute.String("messaging.message.id", info.MessageID))
	}
	if t.partitionKey && info.PartitionKey != "" {
		attrs = append(attrs, attribute.String("jetsaga.message.partition_key", info.PartitionKey))
	}
	if info.Saga != "" {
		attrs = append(attrs, attribute.String("jetsaga.saga.name", info.Saga))
	}
	if info.ID != "" {
		attrs = append(attrs, attribute.String("jetsaga.saga.id", info.ID),
			attribute.String("messaging.message.conversation_id", info.Saga+"/"+info.ID))
	}
	return attrs
}

func (t *Telemetry) stepDone(ctx context.Context, info saga.StepInfo, res saga.StepResult) {
	outcome := attribute.String("jetsaga.step.outcome", string(res.Outcome))
	attrs := metric.WithAttributes(t.metricAttrs(info, outcome)...)
	t.steps.Add(ctx, 1, attrs)
	t.duration.Record(ctx, res.Duration.Seconds(), attrs)
	if res.Conflicts > 0 {
		t.conflicts.Add(ctx, int64(res.Conflicts), attrs)
	}
	switch res.Outcome {
	case saga.Retried:
		t.retries.Add(ctx, 1, attrs)
	case saga.DeadLettered:
		t.deadLetters.Add(ctx, 1, attrs)
	}
	span, ok := ctx.Value(spanKey{}).(trace.Span)
	if !ok {
		return
	}
	span.SetAttributes(t.stepAttrs(info)...)
	span.SetAttributes(outcome, attribute.Int("jetsaga.step.conflicts", res.Conflicts))
	if res.Err != nil {
		span.RecordError(res.Err)
	}
	if res.Outcome == saga.Waiting {
		span.AddEvent("jetsaga.waiting", trace.WithAttributes(attribute.String("jetsaga.waiting.reason", errString(res.Err))))
	}
	switch res.Outcome {
	case saga.Retried, saga.DeadLettered, saga.Abandoned, saga.Waiting:
		span.SetStatus(codes.Error, string(res.Outcome))
	default:
		span.SetStatus(codes.Ok, "")
	}
	span.End()
}

func (t *Telemetry) outgoing(ctx context.Context, props map[string]string) {
	t.Inject(ctx, props)
}

// ObservePendingTimeouts reports the pending timeouts of d by saga as the
// gauge jetsaga.timeouts.pending, read from d.ScheduledTimeouts at each
// collection (see the package documentation for its cost). Unregister
// the returned registration to stop.
func (t *Telemetry) ObservePendingTimeouts(d *saga.Dispatcher) (metric.Registration, error) {
	g, err := t.meter.Int64ObservableGauge("jetsaga.timeouts.pending", metric.WithUnit("{timeout}"),
		metric.WithDescription("Pending timeouts of a dispatcher, by saga."))
	if err != nil {
		return nil, err
	}
	return t.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		n := map[string]int64{}
		var errs []error
		for st, err := range d.ScheduledTimeouts(ctx, "") {
			if err != nil {
				errs = append(errs, err)
				continue
			}
			n[st.Saga]++
		}
		for s, c := range n {
			o.ObserveInt64(g, c, metric.WithAttributes(attribute.String("jetsaga.saga.name", s),
				attribute.String("messaging.destination.name", d.Queue())))
		}
		return errors.Join(errs...)
	}, g)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// ObserveHealth reports whether d waits out an outage (Dispatcher.Health)
// as the gauges jetsaga.dispatcher.waiting (1 or 0) and
// jetsaga.dispatcher.waiting_for (seconds since the wait began, 0 when
// not waiting), by messaging.destination.name. Unregister the returned
// registration to stop.
func (t *Telemetry) ObserveHealth(d *saga.Dispatcher) (metric.Registration, error) {
	waiting, err := t.meter.Int64ObservableGauge("jetsaga.dispatcher.waiting", metric.WithUnit("{dispatcher}"),
		metric.WithDescription("1 while the dispatcher waits for an unavailable dependency, else 0."))
	if err != nil {
		return nil, err
	}
	since, err := t.meter.Float64ObservableGauge("jetsaga.dispatcher.waiting_for", metric.WithUnit("s"),
		metric.WithDescription("How long the dispatcher has waited for an unavailable dependency."))
	if err != nil {
		return nil, err
	}
	return t.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		h := d.Health()
		attrs := metric.WithAttributes(attribute.String("messaging.destination.name", d.Queue()))
		var w int64
		var s float64
		if h.Waiting {
			w, s = 1, time.Since(h.Since).Seconds()
		}
		o.ObserveInt64(waiting, w, attrs)
		o.ObserveFloat64(since, s, attrs)
		return nil
	}, waiting, since)
}
