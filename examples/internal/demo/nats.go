package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// Connect connects to the NATS server at url with opts or, if url is
// empty, starts an embedded nats-server with a temporary store and
// connects to that. It says which on out in one line: "connected to URL"
// or "started an embedded nats-server at URL"; the embedded server's
// warnings and errors go to out too, so out must be safe for concurrent
// writes (os.Stdout is). cleanup closes the connection and shuts the
// embedded server down.
func Connect(url string, out io.Writer, opts ...nats.Option) (nc *nats.Conn, cleanup func(), err error) {
	if url != "" {
		nc, err := nats.Connect(url, append([]nats.Option{transport.ReconnectForever(nil)}, opts...)...)
		if err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(out, "connected to %s\n", url)
		return nc, nc.Close, nil
	}
	// The server's warnings go to out: the reason of a failure the server
	// reports only in its log (a store it cannot create, a full disk).
	srv, err := embedded.Start(embedded.Options{Logger: slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return nil, nil, err
	}
	nc, err = srv.Connect(opts...)
	if err != nil {
		srv.Shutdown()
		return nil, nil, err
	}
	fmt.Fprintf(out, "started an embedded nats-server at %s\n", srv.ClientURL())
	return nc, func() { nc.Close(); srv.Shutdown() }, nil
}

// Config says where a demo keeps its saga on the server. On a shared
// server the demo stays apart from other applications, and it removes
// what it keeps there when it starts and when it ends.
type Config struct {
	// Prefix starts the names of the JetStream streams and subjects of
	// the demo's queues. Required.
	Prefix string
	// Bucket is the key-value bucket of saga state. Required.
	Bucket string
	// Queues are the demo's queues: the dispatcher's and the events queue.
	Queues []string
	// Logger receives the transport's warnings. Default: slog.Default().
	Logger *slog.Logger
}

// Env is a demo's broker and saga store on a NATS server.
type Env struct {
	Broker *transport.Broker
	Store  *kvstore.Store

	js  jetstream.JetStream
	cfg Config
}

// Open opens a broker with cfg's prefix and a key-value store in cfg's
// bucket on nc, after removing the queues and bucket an earlier run left.
// Close removes them again.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Env, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	broker, err := transport.NewJetStream(nc, transport.WithPrefix(cfg.Prefix), transport.WithLogger(cfg.Logger))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		broker.Close()
		return nil, err
	}
	e := &Env{Broker: broker, js: js, cfg: cfg}
	if err := e.clean(ctx); err != nil {
		broker.Close()
		return nil, fmt.Errorf("removing an earlier run's queues: %w", err)
	}
	e.Store, err = kvstore.New(ctx, js, kvstore.Config{Bucket: cfg.Bucket})
	if err != nil {
		_ = e.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return e, nil
}

// Start connects as Connect does (url, or an embedded server if empty)
// and opens the demo's broker and store as Open does. stop removes the
// demo's queues and bucket, closes the broker and disconnects; it
// returns the clean-up's error.
func Start(ctx context.Context, url string, out io.Writer, cfg Config) (env *Env, stop func() error, err error) {
	nc, closeNATS, err := Connect(url, out)
	if err != nil {
		return nil, nil, err
	}
	if env, err = Open(ctx, nc, cfg); err != nil {
		closeNATS()
		return nil, nil, err
	}
	return env, func() error {
		defer closeNATS()
		return env.Close(context.WithoutCancel(ctx))
	}, nil
}

// Close removes the demo's queues and bucket from the server and closes
// the broker. The connection stays open.
func (e *Env) Close(ctx context.Context) error {
	err := e.clean(ctx)
	e.Broker.Close()
	return err
}

// clean removes what the demo keeps on the server: its queues and bucket.
func (e *Env) clean(ctx context.Context) error {
	for _, q := range e.cfg.Queues {
		if err := e.Broker.DeleteQueue(ctx, q); err != nil {
			return err
		}
	}
	if err := e.js.DeleteKeyValue(ctx, e.cfg.Bucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return err
	}
	return nil
}
