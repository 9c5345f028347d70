package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetsaga/jetsaga/internal/natserr"
	"github.com/jetsaga/jetsaga/transport/internal/pull"
	"github.com/jetsaga/jetsaga/transport/internal/tries"
)

// NewJetStream returns a Broker whose queues live in JetStream on the
// server nc is connected to. The caller keeps ownership of nc; the Broker
// never closes it.
//
// Each queue partition is two streams (see the package documentation): a
// schedule stream holding scheduled messages, and a queue stream that
// holds active messages and sources the schedule stream's activations.
func NewJetStream(nc *nats.Conn, opts ...Option) (*Broker, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if nc == nil {
		return nil, fmt.Errorf("%w: nil connection", ErrInvalidOption)
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(o.apiTimeout))
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	life, stop := context.WithCancel(context.Background())
	d := &jsDriver{nc: nc, js: js, o: o, life: life, stop: stop}
	d.hk.d, d.hk.id = d, nuid.Next()
	return &Broker{d: d}, nil
}

type jsDriver struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	o      options
	closed atomic.Bool
	life   context.Context // ends on close, waking blocked receives
	stop   context.CancelFunc

	runner tries.Runner // bounded tries of requests (see tries)

	keepMu sync.Mutex
	keeps  map[string]*partKeep // by stream name (see keepOf)
	hk     housekeeper          // the housekeeping service
}

func (d *jsDriver) maxPayload() int64 { return d.nc.MaxPayload() }

func (d *jsDriver) close() error {
	d.closed.Store(true)
	d.hk.stop()
	d.stop()
	return nil
}

// check returns ErrClosed once the broker or its connection closed.
func (d *jsDriver) check() error {
	if d.closed.Load() || d.nc.IsClosed() {
		return ErrClosed
	}
	return nil
}

// mapErr turns nats.go errors into the package's sentinels, keeping the
// original in the chain.
func (d *jsDriver) mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, pull.ErrClosed), d.check() != nil:
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case errors.Is(err, nats.ErrMaxPayload):
		return fmt.Errorf("%w: %w", ErrMessageTooLarge, err)
	case strings.Contains(err.Error(), "maximum bytes exceeded"):
		// JetStream reports a full stream as a generic store failure
		// (10077) whose text names the limit.
		return fmt.Errorf("%w: %w", ErrQueueFull, err)
	case natserr.Unavailable(err):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return fmt.Errorf("transport: %w", err)
}

// pullConn returns what a puller needs of d (see pull.Conn).
func (d *jsDriver) pullConn() *pull.Conn {
	return &pull.Conn{NC: d.nc, Check: d.check, Done: d.life.Done(), APIContext: d.apiContext}
}

// apiContext bounds ctx by the API timeout if it has no deadline.
func (d *jsDriver) apiContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d.o.apiTimeout)
}

// openStep runs step, one step of opening or attaching a queue, topic or
// subscription (a few API calls that look up, create or update streams
// and consumers, each idempotent), until it gives an answer other than a
// timeout or ctx ends. Each attempt is bounded by the API timeout, or by
// ctx's deadline if that comes first. On a cluster under load an attempt
// can go unanswered although it took effect: the meta leader assigns a new
// stream or consumer and its answer waits for the new group's election,
// and nats-server (2.15) answers only the last of concurrent requests for
// one assignment; a lookup meanwhile can wait on a leader that is not
// elected yet, or be answered "temporarily unavailable". The next attempt
// finds what the lost one made. So processes that open one subscription at
// once each get a definite answer (opened, or ErrInvalidConfig for another
// filter), however long the cluster takes; a context deadline bounds it.
func openStep[T any](ctx context.Context, d *jsDriver, what string, step func(context.Context) (T, error)) (T, error) {
	backoff := openBackoff
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, d.o.apiTimeout)
		v, err := step(actx)
		unanswered := actx.Err() != nil
		cancel()
		if err == nil || ctx.Err() != nil || d.check() != nil || !(unanswered || retryable(err)) {
			return v, err
		}
		d.o.logger.LogAttrs(ctx, slog.LevelWarn, "transport: opening: unanswered or not available yet; asking again",
			slog.String("step", what), slog.Int("attempt", attempt), slogErr(err))
		select {
		case <-ctx.Done():
			return v, d.mapErr(context.Cause(ctx))
		case <-d.life.Done():
			return v, ErrClosed
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// openBackoff is the first pause between attempts of an open's step.
const openBackoff = 50 * time.Millisecond

// retryable reports whether err, the answer to an API request, says that
// the request may succeed if asked again: it timed out, or JetStream is
// temporarily unavailable (a group without a leader).
func retryable(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.As(err, &api) && api.ErrorCode == jsClusterNotAvailable
}

// jsClusterNotAvailable is JetStream's error code for "JetStream system
// temporarily unavailable".
const jsClusterNotAvailable jetstream.ErrorCode = 10008

// serverAckWait is the ack wait the server enforces for a lock of d: d
// plus a grace of d/4 (0.5–5 s). A receiver counts its lock from the
// moment it got the message, which is later than the moment the server
// sent it; the grace keeps the server from redelivering a message whose
// lock its receiver still holds by its own clock, even when the receiver
// is slow to pick the message up.
func serverAckWait(d time.Duration) time.Duration {
	return d + min(max(d/4, 500*time.Millisecond), 5*time.Second)
}

// NATS header names the transport sets or reads.
const (
	natsSchedule       = "Nats-Schedule"
	natsScheduleTarget = "Nats-Schedule-Target"
	natsScheduleNext   = "Nats-Schedule-Next"
	natsScheduleTTL    = "Nats-Schedule-TTL"
	natsScheduler      = "Nats-Scheduler"
	natsTTL            = "Nats-TTL"
	natsStreamSource   = "Nats-Stream-Source"
)

type jsQueue struct {
	d     *jsDriver
	cfg   QueueConfig
	parts []*jsPartition
	dlq   *jsQueue
	isDLQ bool

	mu       sync.Mutex
	sessions map[string]jetstream.Consumer
	pullers  map[*jsPartition]*pull.Puller // see pull.Puller
	bell     pull.Bell                     // rung by every puller (see waitAny)
	rr       atomic.Uint32                 // turns of receives over the partitions (see gather)

	lastPullWarn   atomic.Int64 // unix nanos of the last "pull failed" log
	lastLookupWarn atomic.Int64 // unix nanos of the last "cancel record lookup failed" log

	// lookupFault, when set (by tests), fails cancel record lookups with
	// the error it returns.
	lookupFault func() error

	// topic is set on a topic and its subscriptions (jetstream_topic.go).
	topic *jsTopicShape
}

func (q *jsQueue) deadLetter() queueDriver { return q.dlq }
