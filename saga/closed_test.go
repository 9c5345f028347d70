package saga_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/transport"
)

// Run never returns nil while its context lives: a connection closed for
// good under it — closed by its owner, or given up by nats.go after its
// reconnect attempts — ends Run with an error that matches
// transport.ErrClosed, logged at Error.
func TestRunReturnsAnErrorWhenItsConnectionCloses(t *testing.T) {
	cases := []struct {
		name  string
		opts  []nats.Option
		close func(srvShutdown func(), nc *nats.Conn)
	}{
		{"closed by its owner", nil, func(_ func(), nc *nats.Conn) { nc.Close() }},
		// nats.go's default gives up after 60 attempts; one attempt here.
		{"reconnects given up", []nats.Option{nats.MaxReconnects(1), nats.ReconnectWait(10 * time.Millisecond)},
			func(shutdown func(), _ *nats.Conn) { shutdown() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t)
			nc, err := nats.Connect(srv.ClientURL(), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			n := nodeOn(t, nc, kvstore.Config{}, 10*time.Second)
			n.openQueue(t, transport.QueueConfig{Name: "closed"})
			var logs testutil.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			d := n.dispatcher(t, nil, "closed", saga.WithSagas(counterSaga()), saga.WithLogger(logger))

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- d.Run(ctx) }()
			// The dispatcher works before the connection goes.
			if _, err := d.Send(ctxFor(t), Incr{ID: "a"}); err != nil {
				t.Fatal(err)
			}
			testutil.Await(t, 10*time.Second, func() string {
				if c, _, ok := data[counter](t, d, "counter", "a"); !ok || c.Count != 1 {
					return "the first message not handled yet"
				}
				return ""
			})

			tc.close(srv.Shutdown, nc)
			select {
			case err := <-done:
				if ctx.Err() != nil {
					t.Fatalf("Run returned %v only after its context ended", err)
				}
				if !errors.Is(err, transport.ErrClosed) {
					t.Fatalf("Run returned %v, want an error matching transport.ErrClosed", err)
				}
				if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "connection closed for good") {
					t.Errorf("Run returned %v without logging it at Error; log:\n%s", err, logs.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Run did not return within 30 s of its connection closing for good")
			}
		})
	}
}
