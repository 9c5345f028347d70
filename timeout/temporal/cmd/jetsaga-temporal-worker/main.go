// Command jetsaga-temporal-worker is a standalone worker of the Temporal
// timeout engine: it runs the timeouts' workflows and delivers their
// messages to their JetStream queues, for services that do not run the
// worker in-process (temporal.NewWorker). Run as many as you like; stop
// it with SIGINT or SIGTERM, which lets the deliveries in flight finish.
//
//	go run github.com/jetsaga/jetsaga/timeout/temporal/cmd/jetsaga-temporal-worker \
//		-temporal temporal:7233 -namespace loans -nats nats://nats:4222
//
// The flags must match the services' settings: -task-queue and
// -engine-name their temporal.WithTaskQueue and temporal.WithEngineName,
// -prefix their transport.WithPrefix. Credentials: -nats-creds for NATS;
// for Temporal, -temporal-tls with the system roots, or an API key in
// $TEMPORAL_API_KEY.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/jetsaga/jetsaga/timeout/temporal"
	"github.com/jetsaga/jetsaga/transport"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "jetsaga-temporal-worker:", err)
		os.Exit(1)
	}
}

// run runs the worker until ctx ends. ready, if set, is called once the
// worker polls.
func run(ctx context.Context, args []string, logOut io.Writer, ready func()) error {
	fs := flag.NewFlagSet("jetsaga-temporal-worker", flag.ContinueOnError)
	fs.SetOutput(logOut)
	hostPort := fs.String("temporal", envOr("TEMPORAL_ADDRESS", client.DefaultHostPort), "Temporal frontend host:port")
	namespace := fs.String("namespace", envOr("TEMPORAL_NAMESPACE", client.DefaultNamespace), "Temporal namespace")
	useTLS := fs.Bool("temporal-tls", false, "connect to Temporal over TLS (system roots)")
	taskQueue := fs.String("task-queue", temporal.DefaultTaskQueue, "task queue of the timeouts (temporal.WithTaskQueue)")
	engineName := fs.String("engine-name", temporal.DefaultEngineName, "engine name (temporal.WithEngineName)")
	natsURL := fs.String("nats", envOr("NATS_URL", nats.DefaultURL), "NATS server URL(s), comma-separated")
	natsCreds := fs.String("nats-creds", "", "NATS credentials file")
	prefix := fs.String("prefix", "", "JetStream prefix of the queues (transport.WithPrefix)")
	deliveryTimeout := fs.Duration("delivery-timeout", temporal.DefaultDeliveryTimeout, "start-to-close timeout of a delivery attempt")
	activities := fs.Int("max-deliveries", 0, "deliveries in flight at most (0: the SDK's default)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*level)); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: lvl}))

	var nopts []nats.Option
	if *natsCreds != "" {
		nopts = append(nopts, nats.UserCredentials(*natsCreds))
	}
	nopts = append(nopts, nats.Name("jetsaga-temporal-worker"), nats.MaxReconnects(-1))
	nc, err := nats.Connect(*natsURL, nopts...)
	if err != nil {
		return fmt.Errorf("connecting to NATS: %w", err)
	}
	defer nc.Close()
	var bopts []transport.Option
	if *prefix != "" {
		bopts = append(bopts, transport.WithPrefix(*prefix))
	}
	b, err := transport.NewJetStream(nc, append(bopts, transport.WithLogger(logger))...)
	if err != nil {
		return err
	}
	defer b.Close()

	copts := client.Options{HostPort: *hostPort, Namespace: *namespace, Logger: tlog.NewStructuredLogger(logger)}
	if *useTLS {
		copts.ConnectionOptions.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if key := os.Getenv("TEMPORAL_API_KEY"); key != "" {
		copts.Credentials = client.NewAPIKeyStaticCredentials(key)
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	c, err := client.DialContext(dctx, copts)
	cancel()
	if err != nil {
		return fmt.Errorf("connecting to Temporal at %s: %w", *hostPort, err)
	}
	defer c.Close()

	w, err := temporal.NewWorker(c, b,
		temporal.WithTaskQueue(*taskQueue), temporal.WithEngineName(*engineName), temporal.WithLogger(logger),
		temporal.WithDeliveryTimeout(*deliveryTimeout),
		temporal.WithWorkerOptions(worker.Options{MaxConcurrentActivityExecutionSize: *activities}))
	if err != nil {
		return err
	}
	if err := w.Start(); err != nil {
		return err
	}
	logger.Info("jetsaga-temporal-worker: running", "temporal", *hostPort, "namespace", *namespace, "taskQueue", *taskQueue, "nats", nc.ConnectedUrlRedacted())
	if ready != nil {
		ready()
	}
	<-ctx.Done()
	logger.Info("jetsaga-temporal-worker: stopping")
	w.Stop()
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
