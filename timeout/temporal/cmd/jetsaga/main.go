// Command jetsaga is the jetsaga operator command (see the root module's
// cmd/jetsaga) with the Temporal timeout engine built in: with
// --temporal-address (or $TEMPORAL_ADDRESS) it lists and cancels pending
// timeouts on Temporal beside those on JetStream.
//
//	go install github.com/jetsaga/jetsaga/timeout/temporal/cmd/jetsaga@latest
//	jetsaga --temporal-address temporal:7233 --temporal-namespace loans timeouts list --saga loanoffer
//	jetsaga --temporal-address temporal:7233 sagas cancel-timeouts loanoffer L-17 --queue loans --yes
//
// It is a separate build so that the root module's jetsaga does not pull
// in the Temporal SDK. The engine must be opened as the services open
// theirs: $JETSAGA_TEMPORAL_ENGINE names it if a service used
// temporal.WithEngineName (default "temporal"), and
// $JETSAGA_TEMPORAL_SEARCH_ATTRIBUTES=1 lists through search attributes
// when the services use temporal.WithSearchAttributes. Credentials for
// Temporal: $TEMPORAL_API_KEY (implies TLS), or $TEMPORAL_TLS=1 for TLS
// with the system roots.
package main

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/jetsaga/jetsaga/internal/cli"
	"github.com/jetsaga/jetsaga/timeout/temporal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, opts ...cli.Option) int {
	return cli.Run(ctx, args, stdin, stdout, stderr, append([]cli.Option{cli.WithEngine("temporal", openTemporal)}, opts...)...)
}

// openTemporal dials Temporal and opens the engine for listing and
// cancelling (it runs no worker).
func openTemporal(ctx context.Context, address, namespace string) (cli.EngineScheduler, func(), error) {
	co := client.Options{
		HostPort:  address,
		Namespace: namespace,
		// The SDK's own log lines would mix with the command's output.
		Logger: tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	}
	if key := os.Getenv("TEMPORAL_API_KEY"); key != "" {
		co.Credentials = client.NewAPIKeyStaticCredentials(key)
		co.ConnectionOptions.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	} else if os.Getenv("TEMPORAL_TLS") == "1" {
		co.ConnectionOptions.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	c, err := client.DialContext(ctx, co)
	if err != nil {
		return nil, nil, err
	}
	var eo []temporal.Option
	if name := os.Getenv("JETSAGA_TEMPORAL_ENGINE"); name != "" {
		eo = append(eo, temporal.WithEngineName(name))
	}
	if os.Getenv("JETSAGA_TEMPORAL_SEARCH_ATTRIBUTES") == "1" {
		eo = append(eo, temporal.WithSearchAttributes())
	}
	e, err := temporal.New(c, eo...)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return e, c.Close, nil
}
