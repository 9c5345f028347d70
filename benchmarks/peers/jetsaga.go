package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// jetsaga: timers are scheduled messages on a transport queue
// (Queue.Schedule, Queue.Cancel with its definite outcome, Receive and
// Complete), each with a MessageID (durable duplicate detection); the saga
// is a saga.Dispatcher with a kvstore and the transport timeout engine.

var jetSeq atomic.Int64

func jetsagaPeer(e *env) peer {
	return peer{
		name:   "jetsaga",
		config: "transport.Queue (1 partition, defaults): Schedule with a MessageID, Cancel, Receive(100)+Complete on 4 goroutines; saga: Dispatcher, kvstore, default timeout engine",
		open: func(ctx context.Context, fire func(int)) (timers, error) {
			return openJetsaga(ctx, e, fire)
		},
		saga: func(ctx context.Context, d time.Duration, done func(int)) (sagas, error) {
			return openJetsagaSaga(ctx, e, d, done, 0)
		},
		pending: []string{"-child", "pending", "-peer", "jetsaga"},
	}
}

// jetsagaSagaPeer is jetsaga's saga, with early activation if lead > 0: timers are
// saga timeouts (one instance per timer), handled by the dispatcher.
func jetsagaSagaPeer(e *env, lead time.Duration) peer {
	name, cfg := "jetsaga saga", "one saga instance per timer: Dispatcher.Send starts it, RequestTimeoutAt, the OnTimeout handler is the timer's handler; default engine"
	if lead > 0 {
		name = "jetsaga saga, early activation"
		cfg = fmt.Sprintf("as above, timeout.WithEarlyActivation(%v): the schedule fires %v early, the dispatcher holds it until its due time", lead, lead)
	}
	return peer{
		name: name, config: cfg, noCancel: true,
		open: func(ctx context.Context, fire func(int)) (timers, error) {
			return openJetsagaSagaTimers(ctx, e, fire, lead)
		},
	}
}

type jetTimers struct {
	nc     *nats.Conn
	b      *transport.Broker
	q      *transport.Queue
	name   string
	stop   context.CancelFunc
	wg     sync.WaitGroup
	prefix string
}

func openJetsaga(ctx context.Context, e *env, fire func(int)) (*jetTimers, error) {
	nc, err := e.natsConnect()
	if err != nil {
		return nil, err
	}
	b, err := transport.NewJetStream(nc, transport.WithPrefix("PEERS"), transport.WithLogger(quietLogger()))
	if err != nil {
		nc.Close()
		return nil, err
	}
	k := jetSeq.Add(1)
	t := &jetTimers{nc: nc, b: b, name: fmt.Sprintf("timers-%d", k), prefix: fmt.Sprintf("t%d-", k)}
	if t.q, err = b.OpenQueue(ctx, transport.QueueConfig{Name: t.name}); err != nil {
		t.close()
		return nil, err
	}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	t.stop = stop
	if fire != nil {
		for range 4 {
			t.wg.Go(func() {
				for rctx.Err() == nil {
					ds, err := t.q.Receive(rctx, 100)
					if err != nil {
						if rctx.Err() == nil {
							logf("jetsaga: receive: %v", err)
							time.Sleep(10 * time.Millisecond)
						}
						continue
					}
					for _, d := range ds {
						id, _ := strconv.Atoi(string(d.Body))
						fire(id)
						if err := d.Complete(rctx); err != nil && rctx.Err() == nil {
							logf("jetsaga: complete: %v", err)
						}
					}
				}
			})
		}
	}
	return t, nil
}

func (t *jetTimers) schedule(ctx context.Context, id int, due time.Time) (any, error) {
	ids := strconv.Itoa(id)
	return t.q.Schedule(ctx, &transport.Message{Body: []byte(ids), MessageID: t.prefix + ids}, due)
}

func (t *jetTimers) cancel(ctx context.Context, ref any) error { return t.q.Cancel(ctx, ref.(uint64)) }

func (t *jetTimers) close() {
	if t.stop != nil {
		t.stop()
	}
	t.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := t.b.DeleteQueue(ctx, t.name); err != nil {
		logf("jetsaga: deleting queue: %v", err)
	}
	t.b.Close()
	t.nc.Close()
}

// The two-step saga: a start message requests a timeout; the timeout's
// handler completes the instance.

type sagaStart struct {
	ID  int       `json:"id"`
	Due time.Time `json:"due,omitzero"`
}

func (sagaStart) MessageName() string { return "peers.Start" }

type sagaTick struct{}

func (sagaTick) MessageName() string { return "peers.Tick" }

type sagaData struct {
	N   int       `json:"n"`
	Due time.Time `json:"due,omitzero"`
}

type jetSaga struct {
	nc    *nats.Conn
	b     *transport.Broker
	js    jetstream.JetStream
	d     *saga.Dispatcher
	queue string
	kv    string
	stop  context.CancelFunc
	ran   chan error
}

// openJetsagaSaga starts a dispatcher of a saga whose start requests a
// timeout: after delay (sagas), or at the start message's Due (timers).
func openJetsagaSaga(ctx context.Context, e *env, delay time.Duration, done func(int), lead time.Duration) (*jetSaga, error) {
	nc, err := e.natsConnect()
	if err != nil {
		return nil, err
	}
	k := jetSeq.Add(1)
	s := &jetSaga{nc: nc, queue: fmt.Sprintf("saga-%d", k), kv: fmt.Sprintf("peers_saga_%d", k), ran: make(chan error, 1)}
	if s.b, err = transport.NewJetStream(nc, transport.WithPrefix("PEERS"), transport.WithLogger(quietLogger())); err != nil {
		nc.Close()
		return nil, err
	}
	if s.js, err = jetstream.New(nc); err != nil {
		s.close()
		return nil, err
	}
	store, err := kvstore.New(ctx, s.js, kvstore.Config{Bucket: s.kv})
	if err != nil {
		s.close()
		return nil, err
	}
	def := saga.Define[sagaData]("peers")
	saga.StartedBy(def, saga.By(func(m sagaStart) string { return strconv.Itoa(m.ID) }),
		func(_ context.Context, c *saga.Context[sagaData], m sagaStart) error {
			c.Data.N = m.ID
			if m.Due.IsZero() {
				_, err := c.RequestTimeout(delay, sagaTick{})
				return err
			}
			c.Data.Due = m.Due
			_, err := c.RequestTimeoutAt(m.Due, sagaTick{})
			return err
		})
	saga.OnTimeout(def, func(_ context.Context, c *saga.Context[sagaData], _ sagaTick) error {
		done(c.Data.N)
		c.MarkComplete()
		return nil
	})
	var engine timeout.Scheduler = timeout.NewQueue(s.b)
	if lead > 0 {
		engine = timeout.NewQueue(s.b, timeout.WithEarlyActivation(lead))
	}
	if s.d, err = saga.NewDispatcher(s.b, store, s.queue, saga.WithSagas(def), saga.WithLogger(quietLogger()), saga.WithTimeouts(engine)); err != nil {
		s.close()
		return nil, err
	}
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stop = stop
	go func() { s.ran <- s.d.Run(rctx) }()
	return s, nil
}

func (s *jetSaga) start(ctx context.Context, id int) error {
	_, err := s.d.Send(ctx, sagaStart{ID: id})
	return err
}

func (s *jetSaga) close() {
	if s.stop != nil {
		s.stop()
		select {
		case err := <-s.ran:
			if err != nil {
				logf("jetsaga saga: Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			logf("jetsaga saga: Run did not return within 10s")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s.b != nil {
		s.b.DeleteQueue(ctx, s.queue)
		s.b.Close()
	}
	if s.js != nil {
		s.js.DeleteKeyValue(ctx, s.kv)
	}
	s.nc.Close()
}

// jetSagaTimers are timers as saga timeouts: schedule sends the start
// message of instance id with its due time.
type jetSagaTimers struct{ s *jetSaga }

func openJetsagaSagaTimers(ctx context.Context, e *env, fire func(int), lead time.Duration) (*jetSagaTimers, error) {
	s, err := openJetsagaSaga(ctx, e, 0, fire, lead)
	if err != nil {
		return nil, err
	}
	return &jetSagaTimers{s}, nil
}

func (t *jetSagaTimers) schedule(ctx context.Context, id int, due time.Time) (any, error) {
	_, err := t.s.d.Send(ctx, sagaStart{ID: id, Due: due})
	return nil, err
}

func (t *jetSagaTimers) cancel(context.Context, any) error { return errNotApplicable }

func (t *jetSagaTimers) close() { t.s.close() }
