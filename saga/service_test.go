package saga_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

// serviceFunc is a saga.Service.
type serviceFunc func(ctx context.Context) error

func (f serviceFunc) Run(ctx context.Context) error { return f(ctx) }

// TestWithService: Run starts each service, keeps it running while Run
// runs, and returns only after each service has seen its context end and
// returned; a service that fails on its own does not stop Run.
func TestWithService(t *testing.T) {
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	stopped := make(chan struct{})
	long := serviceFunc(func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // a service that takes a moment to stop: Run must wait for it
		close(stopped)
		return nil
	})
	failed := make(chan struct{})
	failing := serviceFunc(func(context.Context) error { close(failed); return errors.New("broken") })
	if _, err := saga.NewDispatcher(b, memstore.New(), "svc", saga.WithSagas(counterSaga()), saga.WithService(nil)); !errors.Is(err, saga.ErrInvalidOption) {
		t.Fatalf("WithService(nil): got %v, want %v", err, saga.ErrInvalidOption)
	}
	d, err := saga.NewDispatcher(b, memstore.New(), "svc", saga.WithSagas(counterSaga()),
		saga.WithService(long), saga.WithService(failing), saga.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	for _, c := range []chan struct{}{started, failed} {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatal("a service was not started")
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while its context was live", err)
	case <-stopped:
		t.Fatal("a service was stopped while Run was running")
	default:
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	select {
	case <-stopped:
	default:
		t.Fatal("Run returned before its service did")
	}
}
