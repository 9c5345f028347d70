package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetsaga/jetsaga/timeout/temporal/temporaltest"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// env holds the servers the peers run on, each started when a peer first
// needs it and stopped by close.
type env struct {
	cfg   config
	start time.Time

	natsOnce sync.Once
	nats     *embedded.Server
	natsErr  error

	pg *postgres // nil until a Postgres peer runs

	temporal *temporaltest.Server // nil until the Temporal peer runs
}

func newEnv(cfg config) *env { return &env{cfg: cfg, start: time.Now()} }

// natsConnect connects to the embedded nats-server (file storage in a
// temporary directory), starting it on first use.
func (e *env) natsConnect() (*nats.Conn, error) {
	e.natsOnce.Do(func() {
		e.nats, e.natsErr = embedded.Start(embedded.Options{})
	})
	if e.natsErr != nil {
		return nil, e.natsErr
	}
	return e.nats.Connect(nats.Name("jetsaga-peers"))
}

func (e *env) close() {
	if e.nats != nil {
		e.nats.Shutdown()
	}
	if e.pg != nil {
		e.pg.stop()
	}
	if e.temporal != nil {
		e.temporal.Stop()
	}
}

var errNotApplicable = errors.New("not applicable")

var progressStart = time.Now()

// logf reports progress and trouble on stderr, so that stdout holds only
// the results.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(progressStart).Seconds(), fmt.Sprintf(format, args...))
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// waitCtx sleeps for d or until ctx ends.
func waitCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
