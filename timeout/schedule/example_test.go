package schedule_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
)

func Example() {
	ctx := context.Background()
	b, _ := transport.NewMemory()
	defer b.Close()

	pl, _ := calendar.New("pl", "2027.1", calendar.Yearly(time.January, 6, "Epiphany"))
	cals := &calendar.Registry{}
	_ = cals.Add(pl)
	s, _ := schedule.New(b, schedule.WithCalendars(cals))

	every2 := calendar.BusinessDays(2).At(calendar.ClockOf(9, 0)).In("Europe/Warsaw")
	err := s.Create(ctx, schedule.Schedule{
		Name:   "reminders",
		Spec:   schedule.Spec{Rule: &every2, Calendar: calendar.RefOf(pl)},
		Start:  time.Date(2027, time.January, 1, 12, 0, 0, 0, time.UTC),
		Action: schedule.Action{Queue: "billing", Message: &transport.Message{Subject: "SendReminder"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	next, _ := s.Upcoming(ctx, "reminders", 3)
	for _, t := range next {
		fmt.Println(t.In(time.UTC).Format(time.DateTime), schedule.OccurrenceID("reminders", t))
	}

	err = s.Create(ctx, schedule.Schedule{Name: "feb30", Spec: schedule.Spec{Cron: "0 0 30 2 *", Zone: "UTC"},
		Action: schedule.Action{Queue: "billing", Message: &transport.Message{}}})
	fmt.Println(err)
	// Output:
	// 2027-01-05 08:00:00 reminders@20270105T080000Z
	// 2027-01-08 08:00:00 reminders@20270108T080000Z
	// 2027-01-12 08:00:00 reminders@20270112T080000Z
	// schedule: spec never fires: cron "0 0 30 2 *": no month in the expression has any of its days
}
