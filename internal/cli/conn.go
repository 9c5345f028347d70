package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// EngineScheduler is a timeout engine added with WithEngine: a
// timeout.Scheduler, listed if it is also a timeout.Lister.
type EngineScheduler = timeout.Scheduler

// connOpts are the connection flags, named as the nats CLI names them.
type connOpts struct {
	server, creds, nkey, user, password string
	tlsCert, tlsKey, tlsCA              string
	timeout                             time.Duration
	prefix, bucket, stateQueue          string
	temporalAddress, temporalNamespace  string
}

// env is what a command works on: the connection, JetStream, a broker
// with the --prefix, and the timeout engines.
type env struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	broker *transport.Broker
	prefix string
	bucket string
	// stateQueue: the saga records are in this queue's state
	// (saga/queuestore), not in the bucket.
	stateQueue string
	// store, if set, is the store a store flag selects (WithStore),
	// which storeLabel names.
	store      saga.ListingStore
	storeLabel string
	engines    map[string]EngineScheduler // extra engines, by name
	closers    []func()
	rc         runConfig
	// closed is closed when the connection closes for good (nats.go
	// gave up, or it was closed): a long-running command then ends with
	// an error matching transport.ErrClosed.
	closed chan struct{}
}

// errClosed is what a long-running command returns when its connection
// closed for good.
func errClosed(nc *nats.Conn) error {
	if err := nc.LastError(); err != nil {
		return fmt.Errorf("%w: the connection to the server closed: %w", transport.ErrClosed, err)
	}
	return fmt.Errorf("%w: the connection to the server closed", transport.ErrClosed)
}

// notifyClosed is the nats.Option that closes ch when the connection
// closes, after calling the ClosedCB the options before it set.
func notifyClosed(ch chan struct{}) nats.Option {
	return func(o *nats.Options) error {
		prev := o.ClosedCB
		var once sync.Once
		o.ClosedCB = func(nc *nats.Conn) {
			if prev != nil {
				prev(nc)
			}
			once.Do(func() { close(ch) })
		}
		return nil
	}
}

func (e *env) close() {
	for _, f := range e.closers {
		f()
	}
	e.broker.Close()
	e.nc.Close()
}

// natsOptions builds the nats.go options of the connection flags.
func (o connOpts) natsOptions() ([]nats.Option, error) {
	opts := []nats.Option{nats.Name("jetsaga"), nats.Timeout(o.timeout), nats.MaxReconnects(-1)}
	if o.creds != "" {
		opts = append(opts, nats.UserCredentials(o.creds))
	}
	if o.nkey != "" {
		opt, err := nats.NkeyOptionFromSeed(o.nkey)
		if err != nil {
			return nil, fmt.Errorf("--nkey %s: %w", o.nkey, err)
		}
		opts = append(opts, opt)
	}
	if o.user != "" {
		opts = append(opts, nats.UserInfo(o.user, o.password))
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return nil, fmt.Errorf("%w: --tlscert and --tlskey go together", ErrUsage)
	}
	if o.tlsCert != "" {
		opts = append(opts, nats.ClientCert(o.tlsCert, o.tlsKey))
	}
	if o.tlsCA != "" {
		opts = append(opts, nats.RootCAs(o.tlsCA))
	}
	return opts, nil
}

func connect(ctx context.Context, o opts, rc runConfig) (*env, error) {
	co := o.conn
	if co.server == "" {
		return nil, fmt.Errorf("%w: no server: set --server or NATS_URL", ErrUsage)
	}
	if err := transport.ValidateQueueName(co.prefix); err != nil {
		return nil, fmt.Errorf("%w: --prefix: %v", ErrUsage, err)
	}
	if (co.temporalAddress != "" || co.temporalNamespace != "") && rc.engines["temporal"] == nil {
		return nil, fmt.Errorf("%w: --temporal-address: this jetsaga binary has no Temporal engine "+
			"(the root module does not depend on the Temporal SDK); install the Temporal build: "+
			"go install github.com/jetsaga/jetsaga/timeout/temporal/cmd/jetsaga@latest", ErrUsage)
	}
	nopts, err := co.natsOptions()
	if err != nil {
		return nil, err
	}
	closed := make(chan struct{})
	nc, err := nats.Connect(co.server, append(nopts, notifyClosed(closed))...)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", co.server, err)
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(co.timeout))
	if err != nil {
		nc.Close()
		return nil, err
	}
	broker, err := transport.NewJetStream(nc, transport.WithPrefix(co.prefix), transport.WithAPITimeout(co.timeout), transport.WithLogger(rc.logger))
	if err != nil {
		nc.Close()
		return nil, err
	}
	e := &env{nc: nc, js: js, broker: broker, prefix: co.prefix, bucket: co.bucket, stateQueue: co.stateQueue, engines: map[string]EngineScheduler{}, rc: rc, closed: closed}
	if err := e.openStore(ctx); err != nil {
		e.close()
		return nil, err
	}
	if co.temporalAddress != "" || co.temporalNamespace != "" {
		s, closeFn, err := rc.engines["temporal"](ctx, co.temporalAddress, cmp.Or(co.temporalNamespace, "default"))
		if err != nil {
			e.close()
			return nil, fmt.Errorf("temporal engine: %w", err)
		}
		e.engines["temporal"] = s
		if closeFn != nil {
			e.closers = append(e.closers, closeFn)
		}
	}
	return e, nil
}

// env variables the connection flags default to, as the nats CLI's.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// queueStream is the name of the stream of a queue partition; the
// transport documents the layout (P_Q_N_p, P_S_N_p, P_D_N).
func (e *env) queueStream(queue string, p int) string {
	return fmt.Sprintf("%s_Q_%s_%d", e.prefix, queue, p)
}

func (e *env) deadLetterStream(queue string) string { return e.prefix + "_D_" + queue }

// queue returns an existing queue, or an error matching ErrNotFound:
// unlike Broker.Queue it never creates one.
func (e *env) queue(ctx context.Context, name string) (*transport.Queue, error) {
	if err := transport.ValidateQueueName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if _, err := e.js.Stream(ctx, e.queueStream(name, 0)); errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: queue %q (prefix %s)", ErrNotFound, name, e.prefix)
	} else if err != nil {
		return nil, err
	}
	return e.broker.Queue(ctx, name)
}

// queueArg splits "orders" or "orders/$DeadLetterQueue".
func queueArg(s string) (name string, dlq bool) {
	if n, ok := strings.CutSuffix(s, transport.DeadLetterSuffix); ok {
		return n, true
	}
	return s, false
}
