// Command httpservice is a net/http service that runs the two-factor saga
// of package twofactor in-process: its HTTP handlers start and feed sagas
// through a saga.Dispatcher that runs beside the http.Server, and both
// shut down gracefully on SIGINT or SIGTERM.
//
//	go run ./examples/httpservice                    # embedded nats-server, :8080
//	go run ./examples/httpservice -addr :9000 -ttl 30s
//	go run ./examples/httpservice -nats nats://127.0.0.1:4222
//
// # API
//
//	POST /login/{id}/code    {"user": "ann"}     start a 2FA flow; the code goes out by "SMS" (the log)
//	POST /login/{id}/resend                      a new code; the old one stops working
//	POST /login/{id}/verify  {"code": "123456"}  the user's attempt
//	GET  /login/{id}                             the login's state
//
// It prints them when it starts, with curl commands to try them:
//
//	curl -i -d '{"user":"ann"}' http://127.0.0.1:8080/login/l1/code
//	curl -d '{"code":"123456"}' http://127.0.0.1:8080/login/l1/verify    # use the code from "sms: your login code" above
//	curl http://127.0.0.1:8080/login/l1
//
// # How a handler learns the result
//
// The POST handlers only send a command to the dispatcher's queue
// (Dispatcher.Send) and answer 202 Accepted with a Location header: the
// saga handles the command a moment later, in its own step, possibly in
// another replica of the service. Results come back two ways, and GET
// /login/{id} combines them:
//
//   - while the flow runs, Dispatcher.Instance reads its state (attempts
//     used, expiry time, the pending timeout) straight from the store;
//   - the outcome comes from the saga's events: the service consumes the
//     "auth-events" queue — it sends the code by SMS on CodeIssued and
//     records Verified and Failed (a completed saga keeps no state).
//
// So a client polls GET /login/{id} until the status is no longer
// "processing" or "pending"; a browser front end would rather get a push
// (server-sent events, a WebSocket) from the same events consumer. The
// outcomes are kept in memory here; a real service writes them to its
// own database.
//
// The dispatcher handles several messages at once and does not order them
// per login, so a client waits for one attempt's result before sending the
// next (a user typing codes does). An Idempotency-Key header makes a
// retried POST harmless; the 202 answer then says "duplicate": true.
//
// # Shutdown
//
// On SIGINT or SIGTERM the service first stops the HTTP server
// (http.Server.Shutdown: no new requests, the ones in flight finish, so no
// handler is cut off between its checks and its Send), then cancels the
// dispatcher's context and waits for Run to return: it stops receiving and
// lets the saga steps in flight commit. Commands sent but not yet handled
// stay in the queue, and pending timeouts stay scheduled in JetStream;
// the next start (with -nats, on the same server) carries on with them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetsaga/jetsaga/examples/internal/demo"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "HTTP listen address")
	url := flag.String("nats", os.Getenv("NATS_URL"), "NATS server URL; empty starts an embedded nats-server")
	ttl := flag.Duration("ttl", 5*time.Minute, "how long a code lives")
	flag.Parse()
	demo.Main("httpservice", func(ctx context.Context) error {
		return run(ctx, os.Stderr, config{Addr: *addr, NATSURL: *url, TTL: *ttl})
	})
}

// config is the service's settings.
type config struct {
	// Addr is the HTTP listen address. Default: "127.0.0.1:8080".
	Addr string
	// NATSURL is the server to use. Default: an embedded nats-server.
	NATSURL string
	// TTL is how long a code lives. Default: 5m.
	TTL time.Duration
	// NewCode makes codes. Default: 6 random digits.
	NewCode func() string
	// ShutdownTimeout bounds the wait for HTTP requests in flight at
	// shutdown. Default: 10s.
	ShutdownTimeout time.Duration
	// Ready, if set, is called with the listening address once the
	// server accepts connections.
	Ready func(addr string)
}

// usage is what the service prints when it listens at base: its
// endpoints and curl commands to try them (README.md shows them too).
func usage(base string, ttl time.Duration) string {
	return fmt.Sprintf(`
The two-factor flow over HTTP, at %[1]s (codes live %[2]v):

  POST /login/{id}/code    {"user": "ann"}     start a 2FA flow; the code goes out by "SMS" (this log)
  POST /login/{id}/resend                      a new code; the old one stops working
  POST /login/{id}/verify  {"code": "123456"}  the user's attempt
  GET  /login/{id}                             the login's state: processing, pending, verified or failed

Try it from another terminal:

  curl -i -d '{"user":"ann"}' %[1]s/login/l1/code
  curl -d '{"code":"123456"}' %[1]s/login/l1/verify    # use the code from "sms: your login code" above
  curl %[1]s/login/l1

`, base, ttl)
}

// run runs the service until ctx ends, then shuts it down gracefully. It
// logs to out, and prints its endpoints there once it listens.
func run(ctx context.Context, out io.Writer, cfg config) error {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:8080"
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	log := slog.New(slog.NewTextHandler(out, nil))

	// The service says which server it uses in its own structured log.
	nc, closeNATS, err := demo.Connect(cfg.NATSURL, io.Discard, nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer closeNATS()
	if cfg.NATSURL == "" {
		log.Info("started an embedded nats-server; its data is lost at exit (use -nats to keep it)", "url", nc.ConnectedUrl())
	} else {
		log.Info("connected to nats", "url", cfg.NATSURL)
	}
	svc, err := newService(ctx, nc, serviceConfig{TTL: cfg.TTL, NewCode: cfg.NewCode, Logger: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           svc.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	// The dispatcher and the events consumer get a context of their own,
	// cancelled only after the HTTP server has stopped.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = svc.Run(bg) })
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("listening", "url", "http://"+ln.Addr().String(), "ttl", cfg.TTL)
	fmt.Fprint(out, usage("http://"+ln.Addr().String(), cfg.TTL))
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr().String())
	}

	var err1 error
	select {
	case <-ctx.Done():
		log.Info("shutting down: HTTP server first")
	case err1 = <-serveErr:
		log.Error("HTTP server failed; shutting down", "error", err1)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		err1 = errors.Join(err1, fmt.Errorf("http shutdown: %w", err))
	}
	log.Info("HTTP server stopped; draining the dispatcher")
	stopBG()
	wg.Wait()
	if runErr != nil {
		err1 = errors.Join(err1, fmt.Errorf("dispatcher: %w", runErr))
	}
	log.Info("stopped")
	return err1
}
