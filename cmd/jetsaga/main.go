// Command jetsaga operates jetsaga on a NATS server: queues, topics and
// their subscriptions, scheduled messages, dead letters, saga instances
// and their pending timeouts, from the command line or a small web console
// (jetsaga console).
//
//	jetsaga queues list
//	jetsaga --server nats://a:4222,nats://b:4222 --creds ops.creds dlq list orders
//	jetsaga help
//
// Run jetsaga help, or any command with --help, for the commands, their
// flags, examples and exit codes.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/jetsaga/jetsaga/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
