package temporal_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/timeout/temporal"
	"github.com/jetsaga/jetsaga/transport"
)

// A Temporal frontend that cannot be reached makes Schedule and Cancel
// fail with an error matching timeout.ErrUnavailable (saga.ErrUnavailable):
// a saga dispatcher then waits for Temporal instead of counting the
// failure against the message's retries.
func TestUnreachableTemporalIsUnavailable(t *testing.T) {
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := client.NewLazyClient(client.Options{HostPort: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	e, err := temporal.New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = e.Schedule(ctx, timeout.Timeout{ID: "t1", Queue: "q", At: time.Now().Add(time.Hour), Message: &transport.Message{Subject: "x"}})
	if !errors.Is(err, timeout.ErrUnavailable) || !errors.Is(err, saga.ErrUnavailable) {
		t.Errorf("Schedule with Temporal unreachable: %v, want an error matching timeout.ErrUnavailable", err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := e.Cancel(ctx, timeout.Ref(temporal.DefaultEngineName+":q/t1")); !errors.Is(err, timeout.ErrUnavailable) {
		t.Errorf("Cancel with Temporal unreachable: %v, want an error matching timeout.ErrUnavailable", err)
	}
}
