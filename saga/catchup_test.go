package saga_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type (
	cuStart struct{ ID string }
	cuFire  struct{}
	cuOther struct{}
)

func TestCatchUpOptionsAreChecked(t *testing.T) {
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	h := func(context.Context, *saga.Context[struct{}], cuFire) error { return nil }
	tests := []struct {
		name    string
		opt     saga.TimeoutOption
		wantErr error
	}{
		{"negative tolerance", saga.CatchUp(saga.CatchUpSkip, -time.Second), saga.ErrInvalidOption},
		{"late without a handler", saga.CatchUp(saga.CatchUpLate, time.Second), saga.ErrInvalidOption},
		{"unknown policy", saga.CatchUp(saga.CatchUpPolicy(9), time.Second), saga.ErrInvalidOption},
		{"nil late handler", saga.HandleLate[struct{}, cuFire](time.Second, nil), saga.ErrInvalidOption},
		{"late handler of another type", saga.HandleLate(time.Second,
			func(context.Context, *saga.Context[struct{}], cuOther, saga.Lateness) error { return nil }), saga.ErrInvalidDefinition},
		{"late handler of another saga data", saga.HandleLate(time.Second,
			func(context.Context, *saga.Context[int], cuFire, saga.Lateness) error { return nil }), saga.ErrInvalidDefinition},
		{"skip", saga.CatchUp(saga.CatchUpSkip, time.Second), nil},
		{"late", saga.HandleLate(0, func(context.Context, *saga.Context[struct{}], cuFire, saga.Lateness) error { return nil }), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := saga.Define[struct{}]("cu")
			saga.StartedBy(d, saga.By(func(m cuStart) string { return m.ID }), func(context.Context, *saga.Context[struct{}], cuStart) error { return nil })
			saga.OnTimeout(d, h, tt.opt)
			_, err := saga.NewDispatcher(b, memstore.New(), "cu", saga.WithSagas(d))
			if !errors.Is(err, tt.wantErr) || (tt.wantErr != nil && !errors.Is(err, saga.ErrInvalidDefinition)) {
				t.Errorf("got %v, want %v (within ErrInvalidDefinition)", err, tt.wantErr)
			}
		})
	}
}
