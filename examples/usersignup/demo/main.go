// Command demo runs the sign-up service on a private PostgreSQL server
// (the distribution's package, started in a temporary directory) and an
// embedded nats-server: ann signs up and confirms, bob signs up and lets
// his link expire, and a second sign-up of ann's address is refused.
//
//	cd examples/usersignup && go run ./demo
package main

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/examples/usersignup"
	"github.com/jetsaga/jetsaga/internal/pgtest"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	pg, err := pgtest.Start(ctx)
	if err != nil {
		return err
	}
	defer pg.Stop()
	url, err := pg.CreateDatabase(ctx)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	srv, err := embedded.Start(embedded.Options{})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	broker, err := transport.NewJetStream(nc)
	if err != nil {
		return err
	}
	const expiry = 3 * time.Second
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc, err := usersignup.New(ctx, pool, broker, expiry, logger)
	if err != nil {
		return err
	}
	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	defer func() { stopRun(); <-done }()

	for _, email := range []string{"ann@example.com", "bob@example.com", "ann@example.com"} {
		fmt.Printf("sign-up %s: %v\n", email, svc.SignUp(ctx, email))
	}
	mail, err := broker.Queue(ctx, usersignup.MailQueue)
	if err != nil {
		return err
	}
	tokens := map[string]string{}
	for len(tokens) < 2 {
		ds, err := mail.Receive(ctx, 10)
		if err != nil {
			return err
		}
		for _, d := range ds {
			m, err := saga.Decode[usersignup.SendConfirmation](d.Message)
			if err != nil {
				return err
			}
			fmt.Printf("mailer: confirmation link for %s\n", m.Email)
			tokens[m.Email] = m.Token
			if err := d.Complete(ctx); err != nil {
				return err
			}
		}
	}
	if err := svc.Confirm(ctx, "ann@example.com", tokens["ann@example.com"]); err != nil {
		return err
	}
	fmt.Println("ann follows her link; bob does not")
	deadline := time.Now().Add(expiry + 30*time.Second)
	for time.Now().Before(deadline) {
		var users []string
		rows, err := pool.Query(ctx, "SELECT email || CASE WHEN confirmed_at IS NULL THEN ' (unconfirmed)' ELSE ' (confirmed)' END FROM users ORDER BY email")
		if err != nil {
			return err
		}
		for rows.Next() {
			var u string
			if err := rows.Scan(&u); err != nil {
				return err
			}
			users = append(users, u)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(users) == 1 && users[0] == "ann@example.com (confirmed)" {
			fmt.Printf("after %v: users %v: bob's link expired and his address is free\n", expiry, users)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("the users table did not come to ann alone, confirmed, within %v", expiry+30*time.Second)
}
