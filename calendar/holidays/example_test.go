package holidays_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/calendar/holidays"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
)

type (
	Invoiced   struct{ Invoice string }
	chaseTimer struct{}
)

var Invoice = saga.Define[struct{}]("invoice")

func init() {
	saga.StartedBy(Invoice, saga.By(func(m Invoiced) string { return m.Invoice }),
		func(ctx context.Context, c *saga.Context[struct{}], m Invoiced) error {
			_, err := c.RequestTimeoutBy(calendar.BusinessDays(14).At(calendar.ClockOf(9, 0)).In("Europe/Warsaw"), chaseTimer{})
			return err
		})
	saga.OnTimeout(Invoice, func(ctx context.Context, c *saga.Context[struct{}], _ chaseTimer) error {
		c.MarkComplete()
		return nil
	})
}

// A saga and a schedule on Poland's holidays, 2026 to 2030.
func ExampleCountry() {
	b, _ := transport.NewMemory()
	defer b.Close()
	// docs: holidays begin
	pl, err := holidays.Country("pl", 2026, 2030) // pl@cal-v2.1.13+2026-2030
	if err != nil {
		panic(err)
	}
	cals := new(calendar.Registry)
	cals.Add(pl)
	d, _ := saga.NewDispatcher(b, memstore.New(), "billing", saga.WithSagas(Invoice), saga.WithCalendars(cals, calendar.RefOf(pl)))
	s, _ := schedule.New(b, schedule.WithCalendars(cals))
	// docs: holidays end
	_, _ = d, s
	christmasEve := calendar.Date{Year: 2026, Month: time.December, Day: 24}
	name, _ := pl.Holiday(christmasEve)
	fmt.Println(calendar.RefOf(pl), christmasEve, pl.IsBusinessDay(christmasEve), name)
	// Output: pl@cal-v2.1.13+2026-2030 2026-12-24 false Wigilia Bożego Narodzenia
}
