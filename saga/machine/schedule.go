package machine

import (
	"context"
	"fmt"
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

// Schedulable is a Schedule of any payload type, as Activity.Schedule
// and Activity.Unschedule take it.
type Schedulable[S any] interface{ scheduleOf() *schedule[S] }

type schedule[S any] struct {
	name    string
	delay   time.Duration
	payload func(c *saga.Context[S]) any
	key     string
}

// Schedule is a named timeout of a machine: Activity.Schedule requests
// it, Activity.Unschedule cancels it, and Received is raised when it
// fires. Its handle lives in the data (Status.Schedules), so that
// scheduling it again replaces it and only the latest is ever handled:
// one that was unscheduled, replaced, or left pending when the instance
// completed is never raised (saga's timeout token check, and the handle
// compared again here).
type Schedule[S, T any] struct {
	s *schedule[S]
	// Received is raised when the timeout fires, with its payload.
	Received Event[S, T]
}

func (s *Schedule[S, T]) scheduleOf() *schedule[S] { return s.s }

// NewSchedule declares the schedule name (1–64 characters of
// [A-Za-z0-9_-]) whose timeout comes delay after it is scheduled
// (Activity.Schedule; Activity.ScheduleAfter chooses the delay per call), with
// the payload payload returns (nil: T's zero value). T is the timeout's
// message type (see saga.Named): one schedule per type.
func NewSchedule[S, T any](m *Machine[S], name string, delay time.Duration, payload func(c *saga.Context[S]) T) *Schedule[S, T] {
	if !namePattern.MatchString(name) {
		m.fail(fmt.Errorf("%w: schedule name %q: 1-64 characters of [A-Za-z0-9_-]", ErrInvalidMachine, name))
	}
	if delay < 0 {
		m.fail(fmt.Errorf("%w: schedule %s: negative delay %v", ErrInvalidMachine, name, delay))
	}
	key := "schedule/" + name
	s := &schedule[S]{name: name, delay: delay, key: key}
	s.payload = func(c *saga.Context[S]) any {
		if payload == nil {
			return *new(T)
		}
		return payload(c)
	}
	m.claimType(saga.MessageName[T](), key)
	m.addEvent(&eventInfo[S]{key: key, label: name + ".Received", kind: kindScheduled})
	m.schedules = append(m.schedules, s)
	m.registrars = append(m.registrars, func(d *saga.Definition[S]) {
		saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[S], msg T) error {
			in := instanceOf(c)
			if h, ok := in.Machine.Schedules[name]; !ok || h != c.Timeout() {
				return m.finish(ctx, c, in) // stale: not the schedule's latest
			}
			delete(in.Machine.Schedules, name)
			return m.handle(ctx, c, key, msg)
		})
	})
	return &Schedule[S, T]{s: s, Received: Event[S, T]{key: key}}
}

func (s *schedule[S]) start(c *saga.Context[S], in *Instance, delay time.Duration) error {
	s.stop(c, in)
	h, err := c.RequestTimeout(delay, s.payload(c))
	if err != nil {
		return err
	}
	if in.Machine.Schedules == nil {
		in.Machine.Schedules = make(map[string]saga.TimeoutHandle)
	}
	in.Machine.Schedules[s.name] = h
	return nil
}

func (s *schedule[S]) stop(c *saga.Context[S], in *Instance) {
	if h, ok := in.Machine.Schedules[s.name]; ok {
		c.CancelTimeout(h)
		delete(in.Machine.Schedules, s.name)
	}
}
