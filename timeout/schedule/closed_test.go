package schedule_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
)

// Run never returns nil while its context lives: a broker (or connection)
// closed for good under a receiving Run ends it with an error that
// matches transport.ErrClosed.
func TestRunReturnsAnErrorWhenItsBrokerCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := transport.NewMemory()
		if err != nil {
			t.Fatal(err)
		}
		s, err := schedule.New(b, schedule.WithLogger(discard()))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		synctest.Wait() // Run is blocked in its receive
		select {
		case err := <-done:
			t.Fatalf("Run returned %v before the broker closed", err)
		default:
		}
		_ = b.Close()
		select {
		case err = <-done:
		case <-time.After(time.Minute): // virtual time: passes at once unless Run's retries move the clock
			t.Fatal("Run went on retrying for a minute after its broker closed")
		}
		if ctx.Err() != nil || !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Run returned %v (context error %v), want an error matching transport.ErrClosed while its context lives", err, ctx.Err())
		}
	})
}
