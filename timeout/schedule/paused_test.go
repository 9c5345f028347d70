package schedule_test

import (
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
)

// A paused schedule shows no next occurrence (Info.Next is zero, as its doc says), in Get
// and in List, on both brokers; Resume shows one again.
func TestPausedHasNoNext(t *testing.T) {
	for name, open := range brokers {
		t.Run(name, func(t *testing.T) {
			b := open(t)
			ctx := t.Context()
			if _, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "work"}); err != nil {
				t.Fatal(err)
			}
			s, err := schedule.New(b, schedule.WithLogger(discard()))
			if err != nil {
				t.Fatal(err)
			}
			err = s.Create(ctx, schedule.Schedule{Name: "hourly", Spec: schedule.Spec{Every: time.Hour},
				Action: schedule.Action{Queue: "work", Message: &transport.Message{Subject: "Tick"}}})
			if err != nil {
				t.Fatal(err)
			}
			check := func(when string, paused bool) {
				t.Helper()
				got, err := s.Get(ctx, "hourly")
				if err != nil {
					t.Fatal(err)
				}
				var listed []schedule.Info
				for info, err := range s.List(ctx) {
					if err != nil {
						t.Fatal(err)
					}
					listed = append(listed, info)
				}
				if len(listed) != 1 {
					t.Fatalf("%s: List gave %d schedules, want 1", when, len(listed))
				}
				for _, info := range []schedule.Info{got, listed[0]} {
					if info.Paused != paused {
						t.Fatalf("%s: Paused %v, want %v", when, info.Paused, paused)
					}
					if paused && (!info.Next.IsZero() || !info.FireAt.IsZero() || info.Engine != "") {
						t.Errorf("%s: Next %v, FireAt %v, Engine %q: want none, the schedule is paused", when, info.Next, info.FireAt, info.Engine)
					}
					if !paused && (info.Next.IsZero() || info.FireAt.IsZero() || info.Engine == "") {
						t.Errorf("%s: Next %v, FireAt %v, Engine %q: want the pending occurrence", when, info.Next, info.FireAt, info.Engine)
					}
				}
			}
			check("created", false)
			if err := s.Pause(ctx, "hourly", "maintenance"); err != nil {
				t.Fatal(err)
			}
			check("paused", true)
			if err := s.Resume(ctx, "hourly", ""); err != nil {
				t.Fatal(err)
			}
			check("resumed", false)
		})
	}
}
