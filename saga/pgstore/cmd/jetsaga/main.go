// Command jetsaga is the jetsaga operator command (see the root module's
// cmd/jetsaga) with the PostgreSQL saga store built in: with --pg URL (or
// $JETSAGA_PG_URL) the sagas commands and the console read and change the
// saga records in a saga/pgstore table rather than a KV bucket.
//
//	go install github.com/jetsaga/jetsaga/saga/pgstore/cmd/jetsaga@latest
//	jetsaga --pg postgres://ops@db/app sagas list
//	jetsaga --pg postgres://ops@db/app sagas show order 1042
//	jetsaga --pg postgres://ops@db/app sagas cancel-timeouts order 1042 --queue orders --yes
//
// $JETSAGA_PG_TABLE names the table if the services use
// pgstore.WithTable (default jetsaga_sagas). The table must be migrated
// to this build's schema version. It is a separate build so that the
// root module's jetsaga does not pull in pgx.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/internal/cli"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/pgstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, opts ...cli.Option) int {
	pg := cli.WithStore("pg", "JETSAGA_PG_URL", "read saga state from this PostgreSQL database (saga/pgstore) instead of --bucket", openStore)
	return cli.Run(ctx, args, stdin, stdout, stderr, append([]cli.Option{pg}, opts...)...)
}

// openStore opens the pgstore table $JETSAGA_PG_TABLE names (the
// default one otherwise) in the database url names.
func openStore(ctx context.Context, url string) (saga.ListingStore, string, func(), error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, "", nil, err
	}
	var opts []pgstore.Option
	if t := os.Getenv("JETSAGA_PG_TABLE"); t != "" {
		opts = append(opts, pgstore.WithTable(t))
	}
	s, err := pgstore.New(ctx, pool, opts...)
	if err != nil {
		pool.Close()
		return nil, "", nil, err
	}
	return s, "PostgreSQL table " + s.Table(), pool.Close, nil
}
