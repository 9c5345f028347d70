package renewal

import (
	"context"
	"fmt"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/saga"
)

// Messages the saga takes.
type (
	// Subscribed starts a subscription: it renews on Renews, then every
	// month on the same day at the same wall-clock time in Zone (the
	// customer's IANA time zone), for Amount cents.
	Subscribed struct {
		Sub, Customer, Zone string
		Renews              time.Time
		Amount              int64
	}
	// PaymentSucceeded says that the charge for a period went through.
	PaymentSucceeded struct {
		Sub    string
		Period int
	}
	// PaymentFailed says that a charge failed; the saga retries.
	PaymentFailed struct {
		Sub    string
		Period int
		Reason string
	}
	// CancelRequested ends the subscription, at any point.
	CancelRequested struct{ Sub string }
)

// Messages the saga sends to the events queue.
type (
	// Reminder tells the customer that the subscription renews on
	// Renews. LateBy is set for a reminder sent late (an outage).
	Reminder struct {
		Sub, Customer string
		Renews        time.Time
		LateBy        time.Duration `json:",omitempty"`
	}
	// Charge asks the payment service to charge a period; Attempt counts
	// from 1.
	Charge struct {
		Sub             string
		Period, Attempt int
		Amount          int64
	}
	// Renewed says that a period was paid; the next renews on Next.
	Renewed struct {
		Sub    string
		Period int
		Next   time.Time
	}
	// Lapsed says that a period was not paid within the grace period: the
	// subscription ends.
	Lapsed struct {
		Sub    string
		Period int
	}
	// Refund asks the payment service to refund a payment that arrived
	// after the subscription ended (lapsed or cancelled).
	Refund struct {
		Sub    string
		Period int
	}
	// Ended says that the subscription was cancelled.
	Ended struct{ Sub string }
)

// Timeout payloads: each carries its period, so that a timeout of a
// period already settled changes nothing.
type (
	remind    struct{ Period int }
	charge    struct{ Period int }
	retry     struct{ Period int }
	graceOver struct{ Period int }
)

// Stable names, so that messages and pending timeouts survive renaming
// the Go types.
func (Subscribed) MessageName() string       { return "renewal.Subscribed" }
func (PaymentSucceeded) MessageName() string { return "renewal.PaymentSucceeded" }
func (PaymentFailed) MessageName() string    { return "renewal.PaymentFailed" }
func (CancelRequested) MessageName() string  { return "renewal.CancelRequested" }
func (Reminder) MessageName() string         { return "renewal.Reminder" }
func (Charge) MessageName() string           { return "renewal.Charge" }
func (Renewed) MessageName() string          { return "renewal.Renewed" }
func (Lapsed) MessageName() string           { return "renewal.Lapsed" }
func (Refund) MessageName() string           { return "renewal.Refund" }
func (Ended) MessageName() string            { return "renewal.Ended" }
func (remind) MessageName() string           { return "renewal.remind" }
func (charge) MessageName() string           { return "renewal.charge" }
func (retry) MessageName() string            { return "renewal.retry" }
func (graceOver) MessageName() string        { return "renewal.grace-over" }

// State is the saga's data for one subscription.
type State struct {
	Customer, Zone string
	Amount         int64
	Period         int       // the period being renewed, from 1
	Renews         time.Time // when it renews (UTC)
	First          time.Time // the first renewal (UTC): later ones count from it
	Charging       bool      // charged, not paid yet: in grace
	Attempts       int       // charges of this period so far
	GraceEnds      time.Time // when the grace period ends, once charging
	Grace, Retry   saga.TimeoutHandle
}

// The rules, read in the customer's zone.
var (
	// ReminderRule: seven business days before the renewal, at 09:00.
	ReminderRule = calendar.BusinessDays(-7).At(calendar.ClockOf(9, 0))
	// GraceRule: three business days after the renewal, at its time of day.
	GraceRule = calendar.BusinessDays(3)
	// RetryRule: the next business day at 09:00.
	RetryRule = calendar.NextBusinessDay(calendar.ClockOf(9, 0))
	// Renewal returns the rule of the renewal n periods after the first, at
	// its time of day. A series counts from its first date: chaining
	// Months(1) from each renewal drifts (31 Jan, 28 Feb, 28 Mar, ...),
	// while Months(n) from the first keeps the day (31 Jan, 28 Feb, 31 Mar).
	Renewal = calendar.Months
)

// Config shapes the saga.
type Config struct {
	// Events is the queue the saga's messages go to. Default:
	// "billing-events".
	Events string
	// Calendar names the business calendar in the dispatcher's registry
	// (saga.WithCalendars). Default: the dispatcher's default calendar.
	Calendar string
	// ReminderTolerance is how late a reminder may be handled and still
	// be sent as usual; a later one goes to the late handler, which sends
	// it (with LateBy) if the renewal is still to come, and drops it
	// otherwise. Default: 2h.
	ReminderTolerance time.Duration
}

// New returns the renewal saga, named "renewal", keyed by the
// subscription (Sub). The dispatcher that runs it needs a calendar
// registry (saga.WithCalendars).
func New(cfg Config) *saga.Definition[State] {
	if cfg.Events == "" {
		cfg.Events = "billing-events"
	}
	if cfg.ReminderTolerance == 0 {
		cfg.ReminderTolerance = 2 * time.Hour
	}
	from := func(t time.Time) []saga.RuleOption {
		return []saga.RuleOption{saga.OnCalendar(cfg.Calendar), saga.RuleFrom(t)}
	}
	// plan requests the reminder and the charge of the current period.
	plan := func(c *saga.Context[State]) error {
		if _, err := c.RequestTimeoutBy(ReminderRule.In(c.Data.Zone), remind{c.Data.Period}, from(c.Data.Renews)...); err != nil {
			return err
		}
		_, err := c.RequestTimeoutAt(c.Data.Renews, charge{c.Data.Period})
		return err
	}
	chargeNow := func(c *saga.Context[State]) error {
		c.Data.Attempts++
		return c.Send(cfg.Events, Charge{Sub: c.ID(), Period: c.Data.Period, Attempt: c.Data.Attempts, Amount: c.Data.Amount})
	}
	d := saga.Define[State]("renewal", saga.WhenNotFound(saga.NotFoundPolicy{
		// A payment for a subscription that ended (a race with the end of
		// grace, or a cancellation) is refunded.
		Handler: func(ctx context.Context, c *saga.NotFoundContext, m any) error {
			if p, ok := m.(PaymentSucceeded); ok {
				return c.Send(cfg.Events, Refund{Sub: c.ID(), Period: p.Period})
			}
			return nil
		},
	}))
	saga.StartedBy(d, saga.By(func(m Subscribed) string { return m.Sub }),
		func(ctx context.Context, c *saga.Context[State], m Subscribed) error {
			if !c.IsNew() {
				return nil // a repeated Subscribed changes nothing
			}
			if _, err := time.LoadLocation(m.Zone); err != nil || m.Zone == "" {
				return saga.Permanent(fmt.Errorf("renewal %s: zone %q: %w", m.Sub, m.Zone, err))
			}
			c.Data = State{Customer: m.Customer, Zone: m.Zone, Amount: m.Amount, Period: 1, Renews: m.Renews.UTC(), First: m.Renews.UTC()}
			return plan(c)
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[State], t remind) error {
		if t.Period != c.Data.Period {
			return nil
		}
		return c.Send(cfg.Events, Reminder{Sub: c.ID(), Customer: c.Data.Customer, Renews: c.Data.Renews})
	}, saga.HandleLate(cfg.ReminderTolerance, func(ctx context.Context, c *saga.Context[State], t remind, l saga.Lateness) error {
		if t.Period != c.Data.Period || !c.Now().Before(c.Data.Renews) {
			return nil // the renewal came first: a reminder would be news of the past
		}
		return c.Send(cfg.Events, Reminder{Sub: c.ID(), Customer: c.Data.Customer, Renews: c.Data.Renews, LateBy: l.Late})
	}))
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[State], t charge) error {
		if t.Period != c.Data.Period {
			return nil
		}
		c.Data.Charging, c.Data.Attempts = true, 0
		grace, err := c.RequestTimeoutBy(GraceRule.In(c.Data.Zone), graceOver{c.Data.Period}, from(c.Data.Renews)...)
		if err != nil {
			return err
		}
		c.Data.Grace, c.Data.GraceEnds = grace.Handle, grace.At
		if err := scheduleRetry(c, cfg.Calendar); err != nil {
			return err
		}
		return chargeNow(c)
	})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[State], t retry) error {
		if t.Period != c.Data.Period || !c.Data.Charging {
			return nil
		}
		if err := scheduleRetry(c, cfg.Calendar); err != nil {
			return err
		}
		return chargeNow(c)
	})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[State], t graceOver) error {
		if t.Period != c.Data.Period || !c.Data.Charging {
			return nil
		}
		c.MarkComplete()
		return c.Send(cfg.Events, Lapsed{Sub: c.ID(), Period: t.Period})
	})
	saga.Handles(d, saga.By(func(m PaymentFailed) string { return m.Sub }),
		func(ctx context.Context, c *saga.Context[State], m PaymentFailed) error {
			return nil // the next retry, or the end of grace, follows
		})
	saga.Handles(d, saga.By(func(m PaymentSucceeded) string { return m.Sub }),
		func(ctx context.Context, c *saga.Context[State], m PaymentSucceeded) error {
			if m.Period != c.Data.Period || !c.Data.Charging {
				return nil // a repeated confirmation
			}
			c.CancelTimeout(c.Data.Grace)
			c.CancelTimeout(c.Data.Retry)
			next, err := Renewal(m.Period).In(c.Data.Zone).Due(c.Data.First, nil)
			if err != nil {
				return err
			}
			if err := c.Send(cfg.Events, Renewed{Sub: c.ID(), Period: m.Period, Next: next}); err != nil {
				return err
			}
			c.Data = State{Customer: c.Data.Customer, Zone: c.Data.Zone, Amount: c.Data.Amount, Period: m.Period + 1, Renews: next.UTC(), First: c.Data.First}
			return plan(c)
		})
	saga.Handles(d, saga.By(func(m CancelRequested) string { return m.Sub }),
		func(ctx context.Context, c *saga.Context[State], m CancelRequested) error {
			c.MarkComplete() // cancels every pending timeout
			return c.Send(cfg.Events, Ended{Sub: c.ID()})
		})
	return d
}

// scheduleRetry requests the next charge retry, on the next business day
// at 09:00 customer-local, if that is before the grace period ends.
func scheduleRetry(c *saga.Context[State], cal string) error {
	r, err := c.RequestTimeoutBy(RetryRule.In(c.Data.Zone), retry{c.Data.Period}, saga.OnCalendar(cal))
	if err != nil {
		return err
	}
	c.Data.Retry = r.Handle
	if !r.At.Before(c.Data.GraceEnds) {
		c.CancelTimeout(r.Handle) // too late: the grace period ends first
		c.Data.Retry = ""
	}
	return nil
}
