package saga_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type calStart struct{ ID string }

// TestWithCalendarsResolvesCurrentVersionsAtBuild: a registry that holds
// a calendar at several versions needs the current one named; a name in
// current must be in the registry; anything else builds.
func TestWithCalendarsResolvesCurrentVersionsAtBuild(t *testing.T) {
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	cal := func(name, version string) calendar.Calendar {
		c, err := calendar.New(name, version)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	reg := func(cals ...calendar.Calendar) *calendar.Registry {
		r := new(calendar.Registry)
		if err := r.Add(cals...); err != nil {
			t.Fatal(err)
		}
		return r
	}
	pl1, pl2, de1 := cal("pl", "1"), cal("pl", "2"), cal("de", "1")
	tests := []struct {
		name    string
		reg     *calendar.Registry
		current []calendar.Ref
		wantErr error // also matches ErrInvalidOption
	}{
		{"one calendar", reg(pl1), nil, nil},
		{"empty registry", reg(), nil, nil},
		{"two calendars at one version each", reg(pl1, de1), nil, nil},
		{"several versions, current named", reg(pl1, pl2), []calendar.Ref{calendar.RefOf(pl2)}, nil},
		{"several versions, none current", reg(pl1, pl2), nil, saga.ErrNoCurrentCalendar},
		{"several versions, another calendar current", reg(pl1, pl2, de1), []calendar.Ref{calendar.RefOf(de1)}, saga.ErrNoCurrentCalendar},
		{"current not in the registry", reg(pl1), []calendar.Ref{{Name: "pl", Version: "9"}}, calendar.ErrUnknownCalendar},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := saga.Define[struct{}]("cal")
			saga.StartedBy(d, saga.By(func(m calStart) string { return m.ID }), func(context.Context, *saga.Context[struct{}], calStart) error { return nil })
			_, err := saga.NewDispatcher(b, memstore.New(), "cal", saga.WithSagas(d), saga.WithCalendars(tt.reg, tt.current...))
			if !errors.Is(err, tt.wantErr) || (tt.wantErr != nil && !errors.Is(err, saga.ErrInvalidOption)) {
				t.Errorf("got %v, want %v (within ErrInvalidOption)", err, tt.wantErr)
			}
		})
	}
}
