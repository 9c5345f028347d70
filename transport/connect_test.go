package transport_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// ReconnectForever never gives up and logs each change of the
// connection's state once: a line when it is lost, one when it is back
// (with how long it was away), not one per reconnect attempt.
func TestReconnectForeverLogsEachStateChangeOnce(t *testing.T) {
	srv := testutil.StartServer(t, embedded.Options{})
	var logs testutil.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	nc, err := nats.Connect(srv.ClientURL(), transport.ReconnectForever(logger), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if o := nc.Opts; o.MaxReconnect >= 0 || !o.AllowReconnect {
		t.Fatalf("MaxReconnect %d, AllowReconnect %v: want reconnects without end", o.MaxReconnect, o.AllowReconnect)
	}
	for i := 1; i <= 2; i++ {
		if err := srv.Restart(); err != nil {
			t.Fatal(err)
		}
		testutil.Await(t, 30*time.Second, func() string {
			if n := strings.Count(logs.String(), "nats: reconnected"); n < i {
				return fmt.Sprintf("reconnected logged %d times, want %d", n, i)
			}
			return ""
		})
	}
	if err := nc.Publish("x", nil); err != nil {
		t.Fatalf("publish after the restarts: %v", err)
	}
	out := logs.String()
	if d, r := strings.Count(out, "nats: disconnected"), strings.Count(out, "nats: reconnected"); d != 2 || r != 2 {
		t.Errorf("two restarts logged %d disconnects and %d reconnects, want 2 and 2:\n%s", d, r, out)
	}
	if !strings.Contains(out, "away=") {
		t.Errorf("the reconnect line does not say how long the connection was away:\n%s", out)
	}
	nc.Close()
	testutil.Await(t, 10*time.Second, func() string {
		if !strings.Contains(logs.String(), "nats: connection closed") {
			return "the close is not logged"
		}
		return ""
	})
}
